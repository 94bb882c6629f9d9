"""The grammar's LALR tables and lexer, built once and stored as a plain JSON data file.

Building the parser from hlo.lark costs lark about 1-2 s per process (the LALR tables, and
the contextual lexer's check of every pair of terminals for overlaps); loading the same
parser from its serialized form takes ~20 ms.  `hlo_tables.json` (next to hlo.lark) holds
lark's own serialization (`Lark.memo_serialize`) of the parser built from `grammar_text()`,
written as JSON -- data, never code or a pickle -- with the grammar's hash and lark's version:
when either differs from what is installed (an edited grammar, another lark), the parser is
built from the grammar as before, and nothing is written.  Regenerate after editing the
grammar with

    python scripts/write_parser_tables.py

(tests/test_grammar.py fails while the stored file is stale.)  JSON has no tuples and only
string keys, so those two are tagged: {"__t": [...]} a tuple, {"__d": [[k, v], ...]} a dict
with other keys.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

TABLES = Path(__file__).with_name("hlo_tables.json")
# The options the stored parser is built with (those a load may not change).
OPTIONS = dict(parser="lalr", lexer="contextual", maybe_placeholders=False)


def grammar_key(grammar: str) -> str:
    return hashlib.sha256((grammar + repr(sorted(OPTIONS.items()))).encode()).hexdigest()


def _enc(x):
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {k: _enc(v) for k, v in x.items()}
        return {"__d": [[_enc(k), _enc(v)] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__t": [_enc(v) for v in x]}
    if isinstance(x, list):
        return [_enc(v) for v in x]
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    raise TypeError(f"cannot store a {type(x).__name__} in the parser tables")


def _dec(x):
    if isinstance(x, dict):
        if len(x) == 1 and "__d" in x:
            return {_dec(k): _dec(v) for k, v in x["__d"]}
        if len(x) == 1 and "__t" in x:
            return tuple(_dec(v) for v in x["__t"])
        return {k: _dec(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_dec(v) for v in x]
    return x


def tables_text(grammar: str) -> str:
    """The JSON text of the parser built from `grammar` (what hlo_tables.json holds)."""
    import lark
    from lark import Lark
    from lark.grammar import Rule
    from lark.lexer import TerminalDef
    parser = Lark(grammar, **OPTIONS)
    data, memo = parser.memo_serialize([TerminalDef, Rule])
    return json.dumps({"grammar": grammar_key(grammar), "lark": lark.__version__,
                       "data": _enc(data), "memo": _enc(memo)}, separators=(",", ":"),
                      sort_keys=True) + "\n"


def load_parser(grammar: str, **load_options) -> Lark | None:
    """The stored parser for `grammar` with `load_options` (transformer, lexer_callbacks),
    or None when the stored tables are missing or were built from another grammar or lark."""
    import lark
    from lark import Lark
    try:
        stored = json.loads(TABLES.read_text())
    except (OSError, ValueError):
        return None
    if stored.get("grammar") != grammar_key(grammar) or stored.get("lark") != lark.__version__:
        return None
    return Lark._load_from_dict(_dec(stored["data"]), _dec(stored["memo"]), **load_options)


def stored_terminals(grammar: str) -> dict[str, str] | None:
    """The terminals' regular expressions by name, as lark's `pattern.to_regexp()` gives
    them, read from the stored tables without lark (parser_fast needs only these), or None
    when the tables are missing or were built from another grammar."""
    try:
        stored = json.loads(TABLES.read_text())
    except (OSError, ValueError):
        return None
    if stored.get("grammar") != grammar_key(grammar):
        return None
    out = {}
    for _, item in stored["memo"].get("__d", []):
        if isinstance(item, dict) and item.get("__type__") == "TerminalDef":
            pattern = item["pattern"]
            rx = pattern["value"]
            if pattern["__type__"] == "PatternStr":
                rx = re.escape(rx)
            for flag in pattern.get("flags", []):  # lark's Pattern._get_flags
                rx = f"(?{flag}:{rx})"
            out[item["name"]] = rx
    return out or None


def write_tables() -> Path:
    """Store today's grammar's tables (scripts/write_parser_tables.py says where)."""
    from .parser_grammar import grammar_text
    TABLES.write_text(tables_text(grammar_text()))
    return TABLES
