"""Regenerate xlaplug/hlo/text/hlo_tables.json after editing the grammar (hlo.lark):

    python scripts/write_parser_tables.py

The library only writes the file and returns its path (nothing below the CLI prints); this
script says where it went.  tests/test_grammar.py fails while the stored tables are stale."""
from xlaplug.hlo.text.parser_tables import write_tables

if __name__ == "__main__":
    print(f"wrote {write_tables()}")
