"""The grammar itself: LALR(1) without conflicts or terminal collisions (lark strict mode),
and parsing builds IR inside the parser, never a parse tree."""
from __future__ import annotations

import re
import time

import lark
import pytest

from xlaplug.hlo import Module
from xlaplug.hlo.text.parser import _lark, grammar_text, parse_module
from xlaplug.hlo.text.printer import module_to_text


def test_grammar_placeholders_are_all_filled():
    text = grammar_text()
    assert not re.search(r"%[A-Z]+%", text)


def test_grammar_builds_in_strict_mode():
    pytest.importorskip("interegular")  # lark needs it to check terminal collisions
    parser = lark.Lark(grammar_text(), parser="lalr", lexer="contextual", strict=True)
    assert parser.options.parser == "lalr"
    # The cached parser the front end uses builds strictly as well.
    assert _lark(strict=True, with_transformer=False) is not None


def test_front_end_parser_runs_the_transformer_inside_lalr():
    p = _lark()
    assert p.options.parser == "lalr" and p.options.lexer == "contextual"
    assert p.options.transformer is not None


def big_module(n: int) -> str:
    lines = ["HloModule big, entry_computation_layout={(f32[8,8]{1,0})->f32[8,8]{1,0}}", "",
             "add {", "  x = f32[] parameter(0)", "  y = f32[] parameter(1)",
             "  ROOT s = f32[] add(x, y)", "}", "", "ENTRY main {",
             '  v0 = f32[8,8]{1,0} parameter(0), metadata={op_name="x"}']
    for i in range(1, n):
        a = f"v{i - 1}"
        kind = i % 5
        if kind == 0:
            body = (f"f32[8,8]{{1,0}} add({a}, {a}), metadata={{op_name=\"jit(f)/add\" "
                    f"source_file=\"f.py\" source_line={i}}}")
        elif kind == 1:
            body = f"f32[8,8]{{1,0}} transpose({a}), dimensions={{1,0}}"
        elif kind == 2:
            body = (f"f32[8,8]{{1,0}} dot({a}, {a}), lhs_contracting_dims={{1}}, "
                    f"rhs_contracting_dims={{0}}, sharding={{devices=[2,1]<=[2]}}")
        elif kind == 3:
            body = f"f32[8,8]{{1,0}} tanh({a}), metadata={{op_name=\"t\" stack_frame_id=2}}"
        else:
            body = f"f32[8,8]{{1,0}} multiply({a}, {a})"
        lines.append(f"  v{i} = {body}")
    lines.append(f"  ROOT r = f32[8,8]{{1,0}} copy(v{n - 1})")
    lines.append("}")
    return "\n".join(lines) + "\n"


def test_large_module_builds_no_parse_tree(monkeypatch):
    text = big_module(5000)
    parse_module(text)  # warm: grammar construction, caches
    made = []
    real_init = lark.Tree.__init__

    def counting_init(self, *args, **kwargs):
        made.append(args[0] if args else kwargs.get("data"))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(lark.Tree, "__init__", counting_init)
    module = parse_module(text)
    assert isinstance(module, Module)
    assert module.instruction_count() == 5000 + 1 + 3
    # No tree: the transformer runs inside the parser.  (Speed is benchmarks/parse_speed.py's
    # to measure, never a test's.)
    assert made == [], f"parse trees were built: {made[:5]}"


def test_large_module_round_trips():
    text = big_module(500)
    m1 = parse_module(text)
    p1 = module_to_text(m1)
    assert module_to_text(parse_module(p1)) == p1


def test_instructions_are_few_coarse_tokens():
    tokens = list(_lark(with_transformer=False).lex(
        'ROOT r = f32[2]{0} add(a, b), metadata={op_name="x"}, sharding={replicated}\n',
        dont_ignore=False))
    assert [t.type for t in tokens] == ["ROOT", "INSTR_NAME", "SHAPE", "OPCALL", "ATTRS"]


@pytest.mark.parametrize("text", [
    # Unterminated brace followed by a lot of text.
    "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0), backend_config={" + "a," * 20000 + "\n}\n",
    # A very long attribute string that never closes.
    "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={op_name=\"" + "x" * 100000 + "\n}\n",
    # Very many attributes on one instruction, the last one broken.
    "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] parameter(0)" + ", a=1" * 5000 + ", b=\n}\n",
    # Deeply nested parentheses in an operand list.
    "HloModule m\n\nENTRY e {\n  ROOT p = f32[2] add(" + "(" * 2000 + "\n}\n",
])
def test_pathological_inputs_fail_fast(text):
    from xlaplug.hlo import HloSyntaxError
    t0 = time.process_time()
    with pytest.raises(HloSyntaxError):
        parse_module(text)
    assert time.process_time() - t0 < 5.0


def test_crlf_line_endings_and_byte_order_mark(tmp_path):
    from xlaplug.hlo import HloSyntaxError
    from xlaplug.hlo.text.parser import parse_file
    text = ("HloModule m\r\n\r\nENTRY e {\r\n  p = f32[2] parameter(0), metadata={op_name=\"x\"}\r\n"
            "  ROOT r = f32[2] negate(p)\r\n}\r\n")
    assert parse_module(text).entry.root.name == "r"
    path = tmp_path / "bom.hlo"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert parse_file(str(path)).entry.root.name == "r"
    with pytest.raises(HloSyntaxError) as info:
        parse_module(text.replace("negate", "negat"), "crlf.hlo")
    assert str(info.value).split("\n") == [
        "crlf.hlo:5:19: error: unknown opcode 'negat' (did you mean 'negate'?)",
        "  ROOT r = f32[2] negat(p)", " " * 18 + "^"]


def test_stored_parser_tables_are_current_and_used():
    """hlo_tables.json is lark's serialization of today's grammar (regenerate with
    `python scripts/write_parser_tables.py` after editing it), and the front end loads it
    instead of building the grammar."""
    from xlaplug.hlo.text import parser_tables
    if lark.__version__ != __import__("json").loads(
            parser_tables.TABLES.read_text())["lark"]:
        pytest.skip("another lark than the one the tables were stored with: built instead")
    # (lark's state numbering varies from process to process: the key is what is compared;
    # test_stored_and_built_parsers_give_the_same_module compares what they do.)
    stored = __import__("json").loads(parser_tables.TABLES.read_text())
    assert stored["grammar"] == parser_tables.grammar_key(grammar_text())
    assert _lark().source_path == "<deserialized>"


def test_stored_terminals_are_larks_own():
    """parser_fast reads its terminals from the stored tables without importing lark: they
    are the expressions lark lexes with, every one of them."""
    from xlaplug.hlo.text import parser_tables
    stored = parser_tables.stored_terminals(grammar_text())
    assert stored == {t.name: t.pattern.to_regexp() for t in _lark().terminals}


def test_stale_parser_tables_are_not_used(tmp_path, monkeypatch):
    from xlaplug.hlo.text import parser_tables
    stale = tmp_path / "t.json"
    stale.write_text(parser_tables.TABLES.read_text().replace(
        parser_tables.grammar_key(grammar_text()), "0" * 64))
    monkeypatch.setattr(parser_tables, "TABLES", stale)
    assert parser_tables.load_parser(grammar_text()) is None
    assert parser_tables.stored_terminals(grammar_text()) is None
    monkeypatch.setattr(parser_tables, "TABLES", tmp_path / "missing.json")
    assert parser_tables.load_parser(grammar_text()) is None


def test_stored_and_built_parsers_give_the_same_module():
    from xlaplug.hlo.text import parser_tables
    text = big_module(50)
    built = lark.Lark(grammar_text(), **parser_tables.OPTIONS)
    stored = parser_tables.load_parser(grammar_text())
    if stored is None:
        pytest.skip("no stored tables for this lark")
    assert stored.parse(text) == built.parse(text)
