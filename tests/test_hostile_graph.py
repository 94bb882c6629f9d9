"""Hostile graphs: call-graph cycles, instruction cycles, uses before definition and
unbounded dimensions nothing gives a size are verifier errors with a position, so no pass
or kernel sees them."""
import numpy as np
import pytest
from click.testing import CliRunner

from xlaplug.cli.main import main
from xlaplug.hlo.errors import HloVerifyError
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.verifier import verify_module, verify_module_all
from xlaplug.passes import PassContext, PassManager, resolve_pipeline
from xlaplug.runtime.runner import execute

SELF_CALL = """HloModule m
f {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=f
}
ENTRY main {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x), to_apply=f
}
"""

THROUGH_ENTRY = """HloModule m
g {
  p = f32[] parameter(0)
  ROOT r = f32[] call(p), to_apply=main
}
ENTRY main {
  x = f32[] parameter(0)
  ROOT c = f32[] call(x), to_apply=g
}
"""

MUTUAL_WHILE = """HloModule m
cond {
  p = (s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[]) parameter(0)
  ROOT w = (s32[]) while(p), condition=cond, body=other
}
other {
  p = (s32[]) parameter(0)
  ROOT w = (s32[]) while(p), condition=cond, body=body
}
ENTRY main {
  x = (s32[]) parameter(0)
  ROOT w = (s32[]) while(x), condition=cond, body=body
}
"""

REDUCER_SELF = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] reduce(a, b), dimensions={}, to_apply=add
}
ENTRY main {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
}
"""

FORWARD_IN_CALLEE = """HloModule m
f {
  p = f32[3] parameter(0)
  ROOT r = f32[3] add(p, q)
  q = f32[3] negate(p)
}
ENTRY main {
  x = f32[3] parameter(0)
  ROOT c = f32[3] call(x), to_apply=f
}
"""

CYCLE_IN_COMPARATOR = """HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  p = pred[] compare(a, b), direction=LT
  s1 = f32[] select(p, a, s2)
  s2 = f32[] select(p, b, s1)
  ROOT r = pred[] compare(s1, s2), direction=LT
}
ENTRY main {
  x = f32[4] parameter(0)
  ROOT s = f32[4] sort(x), dimensions={0}, to_apply=cmp
}
"""

CONTROL_CYCLE = """HloModule m
ENTRY main {
  x = f32[] parameter(0)
  a = f32[] negate(x), control-predecessors={b}
  b = f32[] negate(a)
  ROOT t = (f32[], f32[]) tuple(a, b)
}
"""


def _error(text):
    with pytest.raises(HloVerifyError) as e:
        verify_module(parse_module(text, "t.hlo"))
    return e.value


@pytest.mark.parametrize("text, line, col, words", [
    (SELF_CALL, 4, 8, "computation 'f' calls itself: instruction 'r' (call) calls 'f'"),
    (THROUGH_ENTRY, 4, 8, "'g' -> 'main' -> 'g'"),
    (MUTUAL_WHILE, 10, 8, "'body' -> 'other' -> 'body'"),
    (REDUCER_SELF, 5, 8, "computation 'add' calls itself"),
])
def test_call_graph_cycles_are_rejected_at_the_calling_instruction(text, line, col, words):
    e = _error(text)
    assert (e.line, e.column) == (line, col)
    assert words in e.message and "acyclic" in e.message


def test_cycle_among_instructions_is_rejected_at_its_first_member():
    e = _error(CYCLE_IN_COMPARATOR)
    assert (e.line, e.column) == (6, 3)
    assert "'s1' -> 's2' -> 's1'" in e.message


def test_cycle_through_a_control_predecessor_is_rejected():
    e = _error(CONTROL_CYCLE)
    assert e.line == 4 and "depends on itself" in e.message


def test_verify_module_all_reports_the_cycle_once():
    errors = verify_module_all(parse_module(CYCLE_IN_COMPARATOR))
    assert [e.line for e in errors if "depends on itself" in e.message] == [6]


def test_use_before_definition_is_rejected_at_the_user():
    e = _error(FORWARD_IN_CALLEE)
    assert (e.line, e.column) == (4, 8)
    assert "uses operand 'q', which is defined after it (line 5)" in e.message


def test_control_predecessor_defined_later_is_rejected():
    e = _error("""HloModule m
ENTRY main {
  x = f32[] parameter(0)
  a = f32[] negate(x), control-predecessors={b}
  b = f32[] negate(x)
  ROOT t = (f32[], f32[]) tuple(a, b)
}
""")
    assert e.line == 4 and "uses control predecessor 'b'" in e.message


def test_passes_walk_definition_order_in_an_unverified_module():
    # Through the API a module need not be verified: inline-calls (once a bare KeyError)
    # clones a callee in definition order whatever its text order.
    module = parse_module(FORWARD_IN_CALLEE)
    PassManager(resolve_pipeline("inline-calls,tuple-simplify,dce")).run(module, PassContext())
    verify_module(module)
    x = np.array([1, 2, 3], np.float32)
    out = execute(module, [x]).outputs[0]
    np.testing.assert_array_equal(out, np.zeros(3, np.float32))


@pytest.mark.parametrize("text", [SELF_CALL, THROUGH_ENTRY, MUTUAL_WHILE, CYCLE_IN_COMPARATOR,
                                  FORWARD_IN_CALLEE])
def test_cli_gives_one_located_line_and_exit_2(tmp_path, text):
    f = tmp_path / "bad.hlo"
    f.write_text(text)
    r = CliRunner().invoke(main, ["run", str(f), "--max-memory", "1G"])
    assert r.exit_code == 2, r.output
    head = r.output.splitlines()[0]
    assert head.startswith(f"{f}:") and ": error: " in head
    assert "Traceback" not in r.output


def test_unbounded_dimension_from_bounded_operands_is_rejected():
    e = _error("""HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = pred[?]{0} compare(x, x), direction=LT
}
""")
    assert (e.line, e.column) == (4, 8)
    assert "dimension 0 is declared unbounded" in e.message and "pred[4]" in e.message


def test_unbounded_dimension_from_an_unbounded_operand_is_accepted():
    verify_module(parse_module("""HloModule m
ENTRY main {
  x = f32[?] parameter(0)
  ROOT c = pred[?]{0} compare(x, x), direction=LT
}
"""))


def test_deep_call_chain_verifies_without_recursion():
    n = 5000
    parts = ["HloModule m"]
    parts.append("c0 {\n  p = f32[] parameter(0)\n  ROOT r = f32[] negate(p)\n}")
    for k in range(1, n):
        parts.append(f"c{k} {{\n  p = f32[] parameter(0)\n"
                     f"  ROOT r = f32[] call(p), to_apply=c{k - 1}\n}}")
    parts.append(f"ENTRY main {{\n  x = f32[] parameter(0)\n"
                 f"  ROOT r = f32[] call(x), to_apply=c{n - 1}\n}}")
    verify_module(parse_module("\n".join(parts) + "\n"))


def test_huge_constant_shape_with_a_short_literal_is_a_clean_error():
    # Found by scripts/fuzz.py: the expected brace skeleton of s8[2^40,1] was built in
    # memory before the literal was compared with it.
    from xlaplug.hlo.errors import HloSyntaxError
    text = """HloModule m
ENTRY main {
  ROOT c = s8[1099511627776,1]{1,0} constant({ {0} })
}
"""
    with pytest.raises(HloSyntaxError, match="expected 1099511627776 elements"):
        parse_module(text)


def test_unbounded_broadcast_of_a_bounded_operand_is_rejected():
    # Found by scripts/fuzz.py: the broadcast kernel raised numpy's ValueError on `?`.
    e = _error("""HloModule m
ENTRY main {
  x = s32[6] parameter(0)
  ROOT b = s32[?,6]{1,0} broadcast(x), dimensions={1}
}
""")
    assert (e.line, e.column) == (4, 8)
    assert "nothing gives its size" in e.message


def test_inlining_an_unverified_call_cycle_is_an_error_not_an_endless_expansion():
    from xlaplug.hlo.errors import HloError
    module = parse_module(THROUGH_ENTRY)  # not verified: the API allows it
    with pytest.raises(HloError, match="cyclic call graph"):
        PassManager(resolve_pipeline("inline-calls")).run(module, PassContext())
    module = parse_module(SELF_CALL)
    with pytest.raises(HloError, match="cyclic call graph"):
        PassManager(resolve_pipeline("inline-calls")).run(module, PassContext())
