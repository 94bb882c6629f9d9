"""The parser never crashes (issue 27): nesting is bounded as XLA's parser bounds it (500
levels of shapes and operand lists, "maximum recursion depth exceeded" at the token past
it), with nothing after the parser recursing without bound; only ASCII digits are numbers.
Each case runs the CLI as a user does (a subprocess): exit code 2 and the error headline.

Expected behaviour comes from XLA's source (xla/hlo/parser/hlo_parser.cc, hlo_parser.h:
`kDefaultMaxRecursionDepth = 500`, checked in ParseShape, ParseOperands and
ParseHloComputation; its lexer reads [0-9] only).  The jaxlib installed here (0.10.2)
predates that limit: it takes a 4,000-deep tuple and dies of a segfault at 8,000."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def xlaplug(*args):
    return subprocess.run([sys.executable, "-m", "xlaplug.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _tuple(depth: int, root_shape: str | None = None) -> str:
    shape = "(" * depth + "f32[]" + ")" * depth
    return (f"HloModule t\nENTRY e {{\n  p = {shape} parameter(0)\n"
            f"  ROOT c = {root_shape or shape} copy(p)\n}}\n")


def _nested(depth: int) -> str:
    return ("HloModule t\nENTRY e {\n  ROOT r = f32[] " + "negate(f32[] " * depth
            + "parameter(0)" + ")" * depth + "\n}\n")


def _fails_at(tmp_path, text, line, col, message, verb="compile"):
    f = tmp_path / "m.hlo"
    f.write_text(text, encoding="utf-8")
    p = xlaplug(verb, f)
    assert p.returncode == 2, p.stderr[-2000:]
    first = p.stderr.splitlines()[0]
    assert first.startswith(f"{f}:{line}:{col}: error: {message}"), first[:300]
    assert "Traceback" not in p.stderr
    return first


# A tuple 8,000 deep segfaulted (exit 139): the parser raised Python's recursion limit to
# 65,536 and the message printed the shape recursively.  600 and 500 are past XLA's limit
# too: the error is at the shape read at level 501 (column 7 + 500: the leaf, or a `(`).
@pytest.mark.parametrize("depth", [8000, 600, 500])
def test_tuple_past_xlas_limit_is_an_error_at_its_position(tmp_path, depth):
    first = _fails_at(tmp_path, _tuple(depth), 3, 507, "maximum recursion depth exceeded")
    assert len(first) < 200  # one line, not the shape


def test_tuple_at_xlas_limit_compiles_and_runs(tmp_path):
    f = tmp_path / "m.hlo"
    f.write_text(_tuple(499))  # the leaf is level 500: XLA reads it
    for verb in ("compile", "run"):
        p = xlaplug(verb, f)
        assert p.returncode == 0, p.stderr[-2000:]


def test_mismatched_deep_tuples_are_reported_not_recursed(tmp_path):
    # The verifier compares and prints two 499-deep shapes: a message, no RecursionError.
    first = _fails_at(tmp_path, _tuple(499, root_shape="f32[]"), 4, 8, "instruction 'c'")
    assert "inferred shape" in first


@pytest.mark.parametrize("depth", [8000, 500])
def test_nested_instructions_past_xlas_limit(tmp_path, depth):
    # `  ROOT r = f32[] ` is 17 columns, each level `negate(f32[] ` 13: the shape inside the
    # 500th operand list is level 501.
    _fails_at(tmp_path, _nested(depth), 3, 18 + 13 * 499 + 7, "maximum recursion depth")


def test_nested_instructions_at_xlas_limit_run(tmp_path):
    f = tmp_path / "m.hlo"
    f.write_text(_nested(499))  # `parameter(0)` is not an operand list
    p = xlaplug("run", f)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("text,col,char", [
    ("  ROOT p = f32[\u0664] parameter(0)", 16, "ARABIC-INDIC DIGIT FOUR"),
    ("  ROOT c = s32[] constant(\u0663)", 27, "ARABIC-INDIC DIGIT THREE"),
    ("  ROOT p = f32[\u00b2] parameter(0)", 16, "SUPERSCRIPT TWO"),  # was a traceback
    ("  ROOT p = f32[2]{\uff10} parameter(0)", 19, "FULLWIDTH DIGIT ZERO"),
    ("  ROOT c = s32[] constant(1), sharding={maximal device=\u0967}", 56,
     "DEVANAGARI DIGIT ONE"),
], ids=["shape", "constant", "superscript", "layout", "attribute"])
def test_only_ascii_digits_are_numbers(tmp_path, text, col, char):
    first = _fails_at(tmp_path, f"HloModule m\nENTRY e {{\n{text}\n}}\n", 3, col,
                      f"'{text[col - 1]}' ({char}) is not a digit")
    assert first.endswith("only ASCII 0-9 are numbers in HLO text")


def test_other_digits_in_strings_and_comments_are_text(tmp_path):
    f = tmp_path / "m.hlo"
    f.write_text('HloModule m\nENTRY e {\n  /* \u0664 */ ROOT p = f32[4] parameter(0), '
                 'metadata={op_name="x\u0663"}\n}\n', encoding="utf-8")
    p = xlaplug("compile", f)
    assert p.returncode == 0, p.stderr
    assert 'op_name="x\u0663"' in p.stdout


def test_inline_computations_past_xlas_limit(tmp_path):
    # XLA counts each computation written inline (ParseHloComputation); 5,000 of them ran
    # for minutes here before the check.
    inner = "p = f32[] parameter(0)\n ROOT r = f32[] negate(p)"
    for k in range(5000):
        inner = f"q{k} = f32[] parameter(0)\n ROOT c{k} = f32[] call(q{k}), to_apply={{ {inner} }}"
    text = ("HloModule t\nENTRY e {\n x = f32[] parameter(0)\n ROOT y = f32[] call(x), "
            "to_apply={ " + inner + " }\n}\n")
    # The 500th inline computation opens on line 503; its first shape, after
    # ` ROOT c4501 = f32[] call(q4501), to_apply={ q4500 = `, is level 501.
    _fails_at(tmp_path, text, 503, 53, "maximum recursion depth exceeded")
    assert len(" ROOT c4501 = f32[] call(q4501), to_apply={ q4500 = ") == 52


def test_inline_computations_at_xlas_limit_parse():
    inner = "p = f32[] parameter(0)\n ROOT r = f32[] negate(p)"
    for k in range(498):  # 499 inline levels: the innermost shapes are level 500
        inner = f"q{k} = f32[] parameter(0)\n ROOT c{k} = f32[] call(q{k}), to_apply={{ {inner} }}"
    text = ("HloModule t\nENTRY e {\n x = f32[] parameter(0)\n ROOT y = f32[] call(x), "
            "to_apply={ " + inner + " }\n}\n")
    from xlaplug.hlo.text.parser_limits import check_limits
    check_limits(text)  # no error; the parse itself takes seconds (inline parses nest)
    with pytest.raises(Exception, match="maximum recursion depth"):
        check_limits(text.replace("to_apply={ q0", "to_apply={ q = f32[] parameter(0)\n"
                                  " ROOT c = f32[] call(q), to_apply={ q0", 1) + "}")


@pytest.mark.parametrize("text, depth", [
    ('f(g(h), {a="((((", b={c}})', 3),  # no escapes or comments: brackets read at C speed
    ('f(g(h), {a="\\"((((", b={c}})', 3),  # an escape: strings read by the expression
    ("f(g) // ((((\n/* (((( */ h({})", 2),  # comments hold no levels
    ('f("(\n))', 2),  # an unterminated string is no string: its `(` counts
    ("f(g))(", 500),  # brackets that do not pair up: the full scan decides
])
def test_the_quick_nesting_bound_skips_strings_and_comments(text, depth):
    """check_limits scans a text only when this bound (the bracket nesting outside strings
    and comments) could reach XLA's limit: it must never be lower than the scan's depth."""
    from xlaplug.hlo.text.parser_limits import MAX_DEPTH, _bracket_depth
    assert _bracket_depth(text) == min(depth, MAX_DEPTH)
