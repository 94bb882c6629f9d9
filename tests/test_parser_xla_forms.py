"""HLO text forms XLA's parser reads (xla/hlo/parser/hlo_parser.cc and its tests), and the
ones it rejects: each form parses, prints back as text that parses to the same print, and
each rejected form is a `FILE:LINE:COL: error:` with the position of the fault."""
from __future__ import annotations

import pytest

from xlaplug.hlo import HloSyntaxError, parse_module
from xlaplug.hlo.text.attributes import format_value
from xlaplug.hlo.text.printer import module_to_text

FILE = "forms.hlo"


def roundtrip(text: str):
    """Parse, print, reparse, print: the two prints agree.  Returns the module."""
    module = parse_module(text, FILE)
    once = module_to_text(module)
    assert module_to_text(parse_module(once, "printed.hlo")) == once
    return module


def by_name(module, comp=None):
    c = module.entry if comp is None else next(x for x in module.computations if x.name == comp)
    return {i.name: i for i in c.instructions}


def error(text: str, line: int, col: int, *fragments: str) -> str:
    with pytest.raises(HloSyntaxError) as info:
        parse_module(text, FILE)
    head = str(info.value).split("\n")[0]
    assert head.startswith(f"{FILE}:{line}:{col}: error: "), head
    for f in fragments:
        assert f in head, head
    return head


# ---- operands printed with their shapes ---------------------------------------------------

def test_operands_with_array_shapes_and_layouts():
    m = roundtrip("""HloModule axpy
ENTRY e {
  %alpha = f32[] parameter(0)
  %broadcast = f32[2,4]{1,0} broadcast(f32[] %alpha), dimensions={}
  %x = f32[2,4]{1,0} parameter(1)
  ROOT %multiply = f32[2,4]{1,0} multiply(f32[2,4]{1,0} %broadcast, f32[2,4]{1,0} %x)
}
""")
    ins = by_name(m)
    assert [o.name for o in ins["multiply"].operands] == ["broadcast", "x"]


def test_operand_with_tuple_shape():
    m = roundtrip("""HloModule copies
ENTRY e {
  %v1 = f32[] parameter(0)
  %copy-start.1 = (f32[], f32[], u32[]) copy-start(f32[] %v1)
  ROOT %copy-done.1 = f32[] copy-done((f32[], f32[], u32[]) %copy-start.1)
}
""")
    assert by_name(m)["copy-done.1"].operands[0].name == "copy-start.1"


def test_operand_shapes_with_comments_between():
    m = roundtrip("""HloModule t
ENTRY e {
  v = f32[] parameter(0)
  ROOT t = (f32[], f32[]) tuple(f32[] %v, /*index=1*/f32[] %v)
}
""")
    assert len(m.entry.root.operands) == 2


def test_malformed_operand_is_located():
    error("HloModule t\nENTRY e {\n  v = f32[] parameter(0)\n  ROOT n = f32[] negate(f32[] +v)\n}\n",
          4, 25, "malformed operand")


# ---- shapes left out, nested instructions ---------------------------------------------------

def test_result_shape_inferred():
    m = roundtrip("""HloModule t
ENTRY e {
  a = f32[4] parameter(0)
  b = s32[2,3] parameter(1)
  v = abs(a)
  d = f32[4,8] parameter(2)
  dot = dot(a, d), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = tuple(v, b, dot)
}
""")
    ins = by_name(m)
    assert str(ins["v"].shape) == "f32[4]"
    assert str(ins["dot"].shape) == "f32[8]"
    assert str(ins["t"].shape) == "(f32[4], s32[2,3], f32[8])"


def test_inferred_shape_of_a_call_uses_the_callee():
    m = roundtrip("""HloModule t
f {
  x = f32[3] parameter(0)
  ROOT y = f32[3] negate(x)
}
ENTRY e {
  p = f32[3] parameter(0)
  ROOT c = call(p), to_apply=f
}
""")
    assert str(m.entry.root.shape) == "f32[3]"


def test_nested_instructions_are_added_before_their_user():
    m = roundtrip("""HloModule test
ENTRY test {
  ROOT root = add(f32[10] parameter(0), multiply(f32[10] parameter(1), f32[10] parameter(2)))
}
""")
    names = [i.name for i in m.entry.instructions]
    assert names == ["parameter.anon", "parameter.anon.1", "parameter.anon.2", "multiply.anon",
                     "root"]
    assert str(m.entry.root.shape) == "f32[10]"


def test_nested_names_do_not_collide_and_plain_names_stay_names():
    m = roundtrip("""HloModule test
ENTRY test {
  add = add(f32[10] parameter(0), f32[10] parameter(1))
  ROOT add2 = add(add, add(add, add))
}
""")
    ins = by_name(m)
    assert [o.name for o in ins["add2"].operands] == ["add", "add.anon"]


def test_nested_instruction_with_tuple_shape():
    m = roundtrip("""HloModule test
ENTRY test {
  ROOT root = get-tuple-element(
    (f32[10], f16[10]) tuple(f32[10] parameter(0), f16[10] parameter(1))
  ), index=0
}
""")
    assert str(m.entry.root.shape) == "f32[10]"


def test_shape_not_inferable_from_a_later_operand():
    error("HloModule t\nENTRY e {\n  a = f32[2] parameter(0)\n  v = abs(w)\n  ROOT w = abs(a)\n}\n",
          4, 3, "'v' has no shape", "'w' is defined after it")


def test_inference_error_is_located():
    error("HloModule t\nENTRY e {\n  a = f32[2] parameter(0)\n  b = f32[3] parameter(1)\n"
          "  ROOT v = add(a, b)\n}\n", 5, 8, "cannot infer the shape of 'v'")


def test_parameter_and_constant_need_shapes():
    error("HloModule t\nENTRY e {\n  ROOT p = parameter(0)\n}\n", 3, 12, "missing shape")


# ---- compact get-tuple-element ------------------------------------------------------------

def test_compact_gte_makes_named_get_tuple_elements_once():
    m = roundtrip("""HloModule test
ENTRY test {
  p0 = (f32[10], (f32[20], f32[30])) parameter(0)
  a = f32[20] negate(f32[20] %p0#1#0)
  ROOT root = f32[20] add(f32[20] %p0#1#0, a)
}
""")
    ins = by_name(m)
    assert [i.name for i in m.entry.instructions] == ["p0", "p0_1", "p0_1_0", "a", "root"]
    assert ins["p0_1_0"].opcode == "get-tuple-element" and ins["p0_1_0"].attrs["index"] == 0
    assert ins["root"].operands[0] is ins["p0_1_0"]


def test_compact_gte_name_collision_is_uniqued():
    m = roundtrip("""HloModule test
ENTRY test {
  p0 = (f32[10], f16[10]) parameter(0)
  p0_0 = f32[10] parameter(1)
  ROOT root = f32[10] add(f32[10] %p0#0, f32[10] %p0_0)
}
""")
    assert [o.name for o in m.entry.root.operands] == ["p0_0.1", "p0_0"]


@pytest.mark.parametrize("use, col, msg", [
    ("p0#0", 30, "GTE operand must be tuple"),
    ("q0#2", 30, "GTE index 2 out of bounds"),
    ("q0#-1", 30, "GTE index -1 out of bounds"),
    ("q0#a", 33, "expects integer indices"),
])
def test_compact_gte_errors(use, col, msg):
    text = ("HloModule t\nENTRY e {\n  p0 = f32[10] parameter(0)\n"
            "  q0 = (f32[10], f16[10]) parameter(1)\n"
            f"  ROOT root = f32[10] negate(%{use})\n}}\n")
    error(text, 5, col, msg)


# ---- module header ------------------------------------------------------------------------

def test_module_name_with_trailing_colon():
    m = roundtrip("HloModule wrong_opcode:\n\nENTRY e {\n  ROOT x = f32[] parameter(0)\n}\n")
    assert m.name == "wrong_opcode"


# ---- inline computations ------------------------------------------------------------------

def test_inline_to_apply_and_calls_are_computations_named_underscore():
    m = roundtrip("""HloModule t
ENTRY e {
  p = f32[4] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(p, z), dimensions={0}, to_apply={
    a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT s = f32[] add(a, b)
  }
  ROOT c = f32[] call(r), to_apply={ x = f32[] parameter(0)  ROOT n = f32[] negate(x) }
}
""")
    names = [c.name for c in m.computations]
    assert names == ["_", "_.1", "e"]
    ins = by_name(m)
    assert ins["r"].attrs["to_apply"] is m.computations[0]
    assert ins["c"].attrs["to_apply"] is m.computations[1]


def test_inline_fusion_calls_and_call_shape_inferred_from_inline():
    m = roundtrip("""HloModule t
ENTRY e {
  p = f32[4] parameter(0)
  f = f32[4] fusion(p), kind=kLoop, calls={ x = f32[4] parameter(0)  ROOT y = f32[4] exponential(x) }
  ROOT c = call(f), to_apply={ x = f32[4] parameter(0)  ROOT y = f32[4] negate(x) }
}
""")
    assert str(m.entry.root.shape) == "f32[4]"
    assert by_name(m)["f"].attrs["calls"][0].root.opcode == "exponential"


@pytest.mark.parametrize("op, body", [("fusion", "p), kind=kLoop, calls=g"),
                                      ("slice", "p), slice={[0:2]}"),
                                      ("all-reduce", "p), to_apply=g"),
                                      ("scan", "p, p), dimensions={0}, to_apply=g")])
def test_shapes_xla_needs_written(op, body):
    text = ("HloModule t\ng {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] negate(x)\n}\n"
            f"ENTRY e {{\n  p = f32[4] parameter(0)\n  ROOT r = {op}({body}\n}}\n")
    error(text, 8, 8, f"'r' needs its shape written: XLA does not infer the shape of {op}")


def test_inline_names_avoid_named_computations():
    m = roundtrip("""HloModule t
_ {
  x = f32[] parameter(0)
  ROOT y = f32[] negate(x)
}
ENTRY e {
  p = f32[] parameter(0)
  a = f32[] call(p), to_apply=_
  ROOT c = f32[] call(a), to_apply={ x = f32[] parameter(0)  ROOT n = f32[] abs(x) }
}
""")
    assert sorted(c.name for c in m.computations) == ["_", "_.1", "e"]


def test_error_inside_inline_computation_has_the_file_position():
    error("HloModule t\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), "
          "to_apply={\n    x = f32[] parameter(0)\n    ROOT n = f32[] nagate(x)\n  }\n}\n",
          6, 20, "unknown opcode 'nagate'")


# ---- opcodes XLA does not have ------------------------------------------------------------

@pytest.mark.parametrize("opcode", ["copy-update", "send-start", "send-update", "recv-start",
                                    "recv-update", "all-reduce-update", "collective-permute-update"])
def test_no_async_sugar_for_ops_with_their_own_start_and_done(opcode):
    error(f"HloModule t\nENTRY e {{\n  p = f32[2] parameter(0)\n  ROOT u = f32[2] {opcode}(p)\n}}\n",
          4, 19, f"unknown opcode '{opcode}'")


def test_async_sugar_for_other_ops_still_parses():
    m = parse_module("""HloModule t
ENTRY e {
  p = f32[2] parameter(0)
  s = ((f32[2]), f32[2], s32[]) negate-start(p)
  ROOT d = f32[2] negate-done(s)
}
""", FILE)
    assert m.entry.root.opcode == "negate-done"


# ---- attributes ---------------------------------------------------------------------------

def test_metadata_fields_separated_by_commas():
    m = roundtrip('HloModule t\nENTRY e {\n  ROOT c = f32[] constant(-4.2), '
                  'metadata={source_line=5, op_type="::const"}\n}\n')
    assert m.entry.root.attrs["metadata"] == {"source_line": 5, "op_type": "::const"}


def test_custom_call_literal_tuple():
    m = roundtrip("""HloModule t
ENTRY e {
  c = f32[1] parameter(0)
  ROOT cc = f32[1,2,3]{0,2,1} custom-call(c), custom_call_target="foo", literal=( s32[4]{0} {4, 128, 128, 3}, pred[4]{0} {1, 0, 0, 0} )
}
""")
    assert format_value("literal", m.entry.root.attrs["literal"]) == \
        "( s32[4]{0} {4, 128, 128, 3}, pred[4]{0} {true, false, false, false} )"


def test_custom_call_literal_tuple_error_is_located():
    error('HloModule t\nENTRY e {\n  ROOT cc = f32[] custom-call(), custom_call_target="f", '
          'literal=( s32[2]{0} {1, 2}, pred[] maybe )\n}\n', 3, 93, "invalid pred literal 'maybe'")


_UNARY = "HloModule t\nENTRY e {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] {op}(p), {attr}\n}}\n"


@pytest.mark.parametrize("op", ["exponential", "log", "tanh", "sine", "sqrt", "logistic"])
def test_result_accuracy_on_transcendental_ops(op):
    m = roundtrip(_UNARY.format(op=op, attr="result_accuracy={mode=highest}"))
    assert str(m.entry.root.attrs["result_accuracy"]) == "{mode=highest}"


def test_result_accuracy_mode_checked():
    error(_UNARY.format(op="exponential", attr="result_accuracy={mode=high}"), 4, 56,
          "unknown result_accuracy mode 'high'")


@pytest.mark.parametrize("op", ["negate", "add", "bitcast-convert"])
def test_result_accuracy_only_where_xla_takes_it(op):
    text = _UNARY.format(op=op, attr="result_accuracy={mode=default}")
    if op == "add":
        text = text.replace("add(p)", "add(p, p)")
    col = text.split("\n")[3].index("result_accuracy") + 1
    error(text, 4, col, "unexpected attribute 'result_accuracy'")


_DEBUG = ('HloModule m, debug_attributes={{\n  {{"constant"}}:({{{body}}})\n}}\n\n'
          'ENTRY e {{\n  ROOT c = s32[] constant(1), origin={{{{"constant"}}}}\n}}\n')


@pytest.mark.parametrize("body", ["log_mode=default,callback_id=123,partitioned=true",
                                  "log_mode=fusion_debugger", "op_id=4"])
def test_debug_attributes(body):
    roundtrip(_DEBUG.format(body=body))


@pytest.mark.parametrize("body, msg", [
    ("log_mode=invalid_mode", "invalid debug attribute value log_mode=invalid_mode"),
    ("callback_id=x", "invalid debug attribute value callback_id=x"),
    ("partitioned=1", "invalid debug attribute value partitioned=1"),
    ("colour=red", "unknown debug attribute 'colour'"),
])
def test_invalid_debug_attributes(body, msg):
    # The caret is on the value when the value is bad, on the name when the name is.
    error(_DEBUG.format(body=body), 2, 18 + (body.index("=") + 1 if "invalid" in msg else 0), msg)


# ---- constants ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1.8e308", "-1.8e308"])
def test_f64_constant_out_of_range(value):
    error(f"HloModule t\nENTRY e {{\n  ROOT c = f64[] constant({value})\n}}\n", 3, 27,
          f"value {value} is out of range for f64")


def test_f64_infinities_are_fine():
    m = roundtrip("HloModule t\nENTRY e {\n  ROOT c = f64[2] constant({inf, -inf})\n}\n")
    assert list(m.entry.root.literal) == [float("inf"), float("-inf")]


def test_u64_minus_one_wraps_as_in_xla():
    m = roundtrip("HloModule t\nENTRY e {\n  ROOT c = u64[] constant(-1)\n}\n")
    assert int(m.entry.root.literal) == 2 ** 64 - 1
    error("HloModule t\nENTRY e {\n  ROOT c = u32[] constant(-1)\n}\n", 3, 27, "out of range")


# ---- one reader for the CLI and the library -----------------------------------------------

_SMALL = "HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n"


@pytest.mark.parametrize("data", [
    _SMALL.encode(),
    b"\xef\xbb\xbf" + _SMALL.encode(),
    _SMALL.replace("\n", "\r\n").encode(),
    b"\xef\xbb\xbf" + _SMALL.replace("\n", "\r\n").encode(),
])
def test_cli_and_library_read_the_same_text(tmp_path, data):
    from xlaplug.runtime.driver import load_module, read_text
    from xlaplug.hlo.text.parser import parse_file
    f = tmp_path / "m.hlo"
    f.write_bytes(data)
    text, name = read_text(str(f))
    assert text == _SMALL and name == str(f)
    assert module_to_text(parse_file(str(f))) == module_to_text(load_module(str(f)))


@pytest.mark.parametrize("data, line, col, msg", [
    (b"HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0) \xff\n}\n", 3, 32,
     "file is not UTF-8 text (byte 0xff)"),
    (b"\xef\xbb\xbfHloModule m\n\x01 \xff\n", 2, 1, "binary data in HLO text (control character 0x01)"),
])
def test_cli_and_library_report_bad_bytes_alike(tmp_path, data, line, col, msg):
    from xlaplug.runtime.driver import read_text
    from xlaplug.hlo.text.parser import parse_file
    f = tmp_path / "bad.hlo"
    f.write_bytes(data)
    for read in (read_text, parse_file):
        with pytest.raises(HloSyntaxError) as info:
            read(str(f))
        head = str(info.value).split("\n")[0]
        assert head == f"{f}:{line}:{col}: error: {msg}", head


def test_crlf_positions_match_lf(tmp_path):
    from xlaplug.hlo.text.parser import parse_file
    bad = "HloModule m\nENTRY e {\n  ROOT p = f32[2] nagate(0)\n}\n"
    heads = []
    for i, text in enumerate((bad, bad.replace("\n", "\r\n"))):
        f = tmp_path / f"m{i}.hlo"
        f.write_bytes(text.encode())
        with pytest.raises(HloSyntaxError) as info:
            parse_file(str(f))
        heads.append(str(info.value).split(": error: ", 1)[1])
        assert (info.value.line, info.value.column) == (3, 19)
    assert heads[0] == heads[1]


# ---- short forms, names, attributes XLA fills in -------------------------------------------

def test_short_form_array_constant_sets_the_first_element():
    # XLA's parser takes one scalar for an array constant: element 0, the rest stay zero.
    m = roundtrip("HloModule t\nENTRY e {\n  ROOT c = f32[2,3] constant(1.5)\n}\n")
    np_lit = m.entry.root.literal
    assert np_lit.shape == (2, 3) and np_lit[0, 0] == 1.5 and np_lit.sum() == 1.5


def test_short_form_needs_a_single_element():
    error("HloModule t\nENTRY e {\n  ROOT c = f32[2] constant(1, 2)\n}\n", 3, 28,
          "must start with '{'")


@pytest.mark.parametrize("stem, name", [("7digits", "_7digits"), ("my model", "my_model"),
                                        ("plain.v2", "plain.v2")])
def test_module_without_header_is_named_after_its_file(tmp_path, stem, name):
    from xlaplug.hlo.text.parser import parse_file
    f = tmp_path / f"{stem}.hlo"
    f.write_text("ENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n")
    m = parse_file(str(f))
    assert m.name == name
    assert parse_module(module_to_text(m)).name == name


def test_scalar_broadcast_gets_empty_dimensions():
    m = roundtrip("HloModule t\nENTRY e {\n  p = f32[] parameter(0)\n"
                  "  ROOT b = f32[] broadcast(p)\n}\n")
    assert tuple(m.entry.root.attrs["dimensions"]) == ()


_ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"


def test_scalar_reduce_window_and_select_and_scatter_get_an_empty_window():
    from xlaplug.hlo.verifier import verify_module
    m = roundtrip("HloModule t\n" + _ADD + "ge {\n  a = f32[] parameter(0)\n"
                  "  b = f32[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=GE\n}\n"
                  "ENTRY e {\n  p = f32[] parameter(0)\n  z = f32[] constant(0)\n"
                  "  r = f32[] reduce-window(p, z), to_apply=add\n"
                  "  ROOT s = f32[] select-and-scatter(p, r, z), select=ge, scatter=add\n}\n")
    verify_module(m)
    assert str(by_name(m)["r"].attrs["window"]) == "{}"


def test_array_reduce_window_still_needs_its_window():
    from xlaplug.hlo.errors import HloError
    from xlaplug.hlo.verifier import verify_module
    m = parse_module("HloModule t\n" + _ADD + "ENTRY e {\n  p = f32[4] parameter(0)\n"
                     "  z = f32[] constant(0)\n  ROOT r = f32[4] reduce-window(p, z), "
                     "to_apply=add\n}\n")
    with pytest.raises(HloError, match="missing attribute 'window'"):
        verify_module(m)


def test_combined_collective_permute_and_its_start():
    from xlaplug.hlo.verifier import verify_module
    m = roundtrip("""HloModule t
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[8] parameter(1)
  cp = (f32[4], f32[8]) collective-permute(a, b), source_target_pairs={{0,1},{1,0}}
  s = ((f32[4], f32[8]), (f32[4], f32[8])) collective-permute-start(a, b), source_target_pairs={{0,1}}
  d = (f32[4], f32[8]) collective-permute-done(s)
  ROOT t = tuple(cp, d)
}
""")
    verify_module(m)


def test_collective_broadcast_with_dynamic_root():
    from xlaplug.hlo.verifier import verify_module
    m = roundtrip("""HloModule t
ENTRY e {
  input = f32[128,32]{0,1} parameter(0)
  root = f32[1]{0} parameter(1)
  ROOT cb = f32[128,32]{0,1} collective-broadcast(input, root), replica_groups={{1,0},{2,3}}, has_dynamic_root=true
}
""")
    verify_module(m)
    assert m.entry.root.attrs["has_dynamic_root"] is True


def test_shapes_declared_on_send_send_done_outfeed_are_replaced():
    m = roundtrip("""HloModule t
ENTRY e {
  t = token[] after-all()
  c = f32[] constant(1)
  s = f32[] send(c, t), channel_id=1
  sd = f32[] send-done(s), channel_id=1
  o = f32[] outfeed(c, t)
  ROOT r = token[] after-all()
}
""")
    ins = by_name(m)
    assert str(ins["s"].shape) == "(f32[], u32[], token[])"
    assert str(ins["sd"].shape) == "token[]" and str(ins["o"].shape) == "token[]"


def test_late_bound_async_start():
    from xlaplug.hlo.verifier import verify_module
    m = roundtrip("""HloModule t
wrapped {
  p0 = f32[2,3] parameter(0)
  p1 = f32[2,3] parameter(1)
  ROOT a = f32[2,3] add(p0, p1)
}
ENTRY e {
  p0 = f32[2,3] parameter(0)
  p1 = f32[2,3] parameter(1)
  s = ((f32[2,3]), f32[2,3], s32[]) async-start(p0), calls=wrapped
  u = ((f32[2,3], f32[2,3]), f32[2,3], s32[]) async-update(s, p1)
  ROOT d = f32[2,3] async-done(u)
}
""")
    verify_module(m)


def test_late_binding_checks_the_bound_operands():
    from xlaplug.hlo.errors import HloError
    from xlaplug.hlo.verifier import verify_module
    m = parse_module("""HloModule t
wrapped {
  p0 = f32[2,3] parameter(0)
  p1 = f32[2,3] parameter(1)
  ROOT a = f32[2,3] add(p0, p1)
}
ENTRY e {
  p0 = f32[2,3] parameter(0)
  q = f32[3] parameter(1)
  s = ((f32[2,3]), f32[2,3], s32[]) async-start(p0), calls=wrapped
  u = ((f32[2,3], f32[3]), f32[2,3], s32[]) async-update(s, q)
  ROOT d = f32[2,3] async-done(u)
}
""")
    with pytest.raises(HloError, match="operand 1 is f32\\[3\\] but 'wrapped' parameter 1"):
        verify_module(m)


# ---- what XLA rejects ---------------------------------------------------------------------

def test_operand_written_with_the_wrong_shape():
    error("HloModule t\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(f32[3] p)\n}\n",
          4, 33, "operand 'p' of 'n' is written with shape f32[3], but 'p' has shape f32[2]")


def test_operand_shape_layout_may_differ():
    roundtrip("HloModule t\nENTRY e {\n  p = f32[2,2]{1,0} parameter(0)\n"
              "  ROOT n = f32[2,2] negate(f32[2,2]{0,1} p)\n}\n")


def test_dim_level_types_checked():
    roundtrip("HloModule t\nENTRY e {\n  ROOT p = f32[2,2]{1,0:D(D,C+~)} parameter(0)\n}\n")
    error("HloModule t\nENTRY e {\n  ROOT p = f32[2,2]{1,0:D(X,C)} parameter(0)\n}\n", 3, 12,
          "dim level types D(..) of D, C, S or H")


def test_pred_conditional_with_branch_computations_is_rejected():
    from xlaplug.hlo.errors import HloError
    from xlaplug.hlo.verifier import verify_module
    m = parse_module("""HloModule t
a {
  x = f32[] parameter(0)
  ROOT y = f32[] negate(x)
}
b {
  x = f32[] parameter(0)
  ROOT y = f32[] abs(x)
}
ENTRY e {
  p = pred[] parameter(0)
  x = f32[] parameter(1)
  ROOT c = f32[] conditional(p, x, x), branch_computations={a, b}
}
""")
    with pytest.raises(HloError, match="pred index needs true_computation and false_computation"):
        verify_module(m)


# ---- nesting up to XLA's 8,192 levels -----------------------------------------------------

def _deep_config(depth: int) -> str:
    return ("HloModule t\nENTRY e {\n  ROOT p = f32[] parameter(0), frontend_attributes="
            '{a="1"}, backend_config=' + "{" * depth + "}" * depth + ', sharding={replicated}\n}\n')


@pytest.mark.parametrize("depth", [9, 100, 8192])
def test_deep_braces_in_an_attribute(depth):
    m = roundtrip(_deep_config(depth))
    assert str(m.entry.root.attrs["backend_config"]) == "{" * depth + "}" * depth
    assert "sharding" in m.entry.root.attrs


def test_braces_past_xlas_limit():
    text = _deep_config(8193)
    col = text.split("\n")[2].index("{" * 8193) + 8193
    error(text, 3, col, "nesting deeper than 8192 levels")


def _deep_tuple(depth: int) -> str:
    shape = "(" * depth + "f32[]" + ")" * depth
    return (f"HloModule t\nENTRY e {{\n  p = {shape} parameter(0)\n"
            f"  ROOT c = {shape} copy({shape} p)\n}}\n")


@pytest.mark.parametrize("depth", [6, 50])
def test_deep_tuple_shapes_in_operands(depth):
    m = roundtrip(_deep_tuple(depth))
    assert m.entry.root.operands[0].name == "p"


def test_deep_nested_instructions():
    depth = 8192  # linear: each level's operand list is cut through one bracket map
    text = ("HloModule t\nENTRY e {\n  ROOT r = " + "negate(" * depth + "f32[] parameter(0)"
            + ")" * depth + "\n}\n")
    m = parse_module(text, FILE)
    assert m.instruction_count() == depth + 1
    assert str(m.entry.root.shape) == "f32[]"


def test_nested_instructions_past_xlas_limit():
    depth = 8193
    text = ("HloModule t\nENTRY e {\n  ROOT r = " + "negate(" * depth + "f32[] parameter(0)"
            + ")" * depth + "\n}\n")
    error(text, 3, 12 + 7 * depth + len("f32[] parameter"), "nesting deeper than 8192 levels")


def test_unbalanced_operand_list_still_reported():
    error("HloModule t\nENTRY e {\n  ROOT r = f32[] negate(((((((p)\n}\n", 3, 24,
          "unbalanced '('")


# ---- buffer shapes ------------------------------------------------------------------------

def test_buffer_shapes():
    m = roundtrip("""HloModule t
ENTRY e {
  param = (b(f32[16]), f32[16]) parameter(0)
  b0 = b(f32[16]{0}) get-tuple-element(param), index=0
  ROOT u = f32[16] custom-call(b(f32[16]) b0), custom_call_target="Unpin"
}
""")
    ins = by_name(m)
    assert ins["b0"].shape.buffer and str(ins["b0"].shape) == "b(f32[16]{0})"
    assert not ins["u"].shape.buffer
    assert not ins["b0"].shape.compatible(ins["u"].shape)


@pytest.mark.parametrize("shape", ["b()", "b(s32[], f32[])", "b((f32[2]))"])
def test_malformed_buffer_shapes(shape):
    from xlaplug.hlo.text.shape_parser import ShapeError, parse_shape
    with pytest.raises(ShapeError):
        parse_shape(shape)
