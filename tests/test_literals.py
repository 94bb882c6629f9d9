"""Constants of every element type: text -> numpy values (exact, bitwise for floats) ->
text -> the same values, both through parse_module/module_to_text and literals directly."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from xlaplug.hlo import HloSyntaxError, dtypes
from xlaplug.hlo.ir import Shape
from xlaplug.hlo.text.literal_format import format_literal
from xlaplug.hlo.text.literals import LiteralError, parse_literal
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.text.printer import module_to_text
from xlaplug.hlo.text.shape_parser import parse_shape


def constant(shape: str, literal: str):
    """Parse `ROOT c = shape constant(literal)`, round-trip the module, check both agree
    bitwise; return (value, printed literal text)."""
    text = f"HloModule m\n\nENTRY e {{\n  ROOT c = {shape} constant({literal})\n}}\n"
    m1 = parse_module(text, "lit.hlo")
    printed = module_to_text(m1)
    m2 = parse_module(printed, "printed.hlo")
    assert module_to_text(m2) == printed
    v1, v2 = m1.entry.root.literal, m2.entry.root.literal
    assert_same(v1, v2)
    line = printed.splitlines()[3]
    return v1, line[line.index("constant(") + len("constant("):-1]


def bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a).reshape(-1)
    if a.dtype.kind == "c":
        a = a.view(np.float32 if a.dtype == np.complex64 else np.float64)
    if a.dtype == np.bool_:
        return a
    if dtypes.from_dtype(a.dtype) == "f4e2m1fn":
        return a.view(np.uint8)
    return a.view(f"u{a.dtype.itemsize}")


def assert_same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(bits(a), bits(b)), f"{a!r} != {b!r}"


# ---- scalars of every element type -------------------------------------------------------

SCALARS = [
    ("pred[]", "true", np.bool_(True)), ("pred[]", "false", np.bool_(False)),
    ("s1[]", "-1", ml_dtypes.int1(-1)), ("u1[]", "1", ml_dtypes.uint1(1)),
    ("s2[]", "-2", ml_dtypes.int2(-2)), ("u2[]", "3", ml_dtypes.uint2(3)),
    ("s4[]", "-8", ml_dtypes.int4(-8)), ("u4[]", "15", ml_dtypes.uint4(15)),
    ("s8[]", "-128", np.int8(-128)), ("u8[]", "255", np.uint8(255)),
    ("s16[]", "-32768", np.int16(-32768)), ("u16[]", "65535", np.uint16(65535)),
    ("s32[]", "-2147483648", np.int32(-2147483648)), ("u32[]", "4294967295", np.uint32(4294967295)),
    ("s64[]", "-9223372036854775808", np.int64(-9223372036854775808)),
    ("s64[]", "9223372036854775807", np.int64(9223372036854775807)),
    ("u64[]", "18446744073709551615", np.uint64(18446744073709551615)),
    ("u64[]", "0", np.uint64(0)),
    ("f16[]", "65504", np.float16(65504)), ("f16[]", "6e-08", np.float16(6e-08)),
    ("bf16[]", "3.3895314e+38", ml_dtypes.bfloat16(3.3895314e+38)),
    ("bf16[]", "-0.00390625", ml_dtypes.bfloat16(-0.00390625)),
    ("f32[]", "1.5", np.float32(1.5)), ("f32[]", "0.1", np.float32(0.1)),
    ("f32[]", "3.4028235e+38", np.float32(3.4028235e+38)), ("f32[]", "1e-45", np.float32(1e-45)),
    ("f64[]", "0.1", np.float64(0.1)), ("f64[]", "1.7976931348623157e+308", np.float64(1.7976931348623157e+308)),
    ("f64[]", "5e-324", np.float64(5e-324)),
    ("f8e5m2[]", "57344", ml_dtypes.float8_e5m2(57344)),
    ("f8e4m3[]", "240", ml_dtypes.float8_e4m3(240)),
    ("f8e4m3fn[]", "448", ml_dtypes.float8_e4m3fn(448)),
    ("f8e4m3fn[]", "-0.001953125", ml_dtypes.float8_e4m3fn(-0.001953125)),
    ("f8e4m3b11fnuz[]", "30", ml_dtypes.float8_e4m3b11fnuz(30)),
    ("f8e3m4[]", "15.5", ml_dtypes.float8_e3m4(15.5)),
    ("f8e5m2fnuz[]", "57344", ml_dtypes.float8_e5m2fnuz(57344)),
    ("f8e4m3fnuz[]", "240", ml_dtypes.float8_e4m3fnuz(240)),
    ("f4e2m1fn[]", "-6", ml_dtypes.float4_e2m1fn(-6)),
    ("f8e8m0fnu[]", "1024", ml_dtypes.float8_e8m0fnu(1024)),
    ("c64[]", "(1, 2)", np.complex64(1 + 2j)), ("c128[]", "(-0.5, 1e+300)", np.complex128(-0.5 + 1e300j)),
]


@pytest.mark.parametrize("shape,text,expected", SCALARS, ids=[f"{s}{t}" for s, t, _ in SCALARS])
def test_scalar_values_exact(shape, text, expected):
    value, printed = constant(shape, text)
    assert value.shape == () and value.dtype == np.asarray(expected).dtype
    assert_same(value, np.asarray(expected))
    assert printed == text  # already the shortest exact text


@pytest.mark.parametrize("etype", sorted(dtypes.ELEMENT_DTYPES))
def test_every_element_type_has_literals(etype):
    shape = parse_shape(f"{etype}[2]")
    one = ("true" if etype == "pred" else "(1, 0)" if dtypes.is_complex(etype)
           else "-1" if etype == "s1" else "1")
    value, printed = constant(f"{etype}[2]", "{" + one + ", " + one + "}")
    assert value.dtype == shape.dtype and value.shape == (2,)
    assert printed == "{" + one + ", " + one + "}"


def test_integer_and_hex_spellings_and_pred_from_ints():
    assert constant("s32[2]", "{0x10, -0x10}")[0].tolist() == [16, -16]
    assert constant("pred[3]", "{1, 0, true}")[0].tolist() == [True, False, True]
    assert constant("f32[]", "2")[0] == np.float32(2)


# ---- arrays ------------------------------------------------------------------------------

def test_nested_arrays():
    value, printed = constant("f32[2,3]", "{ { 1, 2, 3 }, { 4, 5.5, -6 } }")
    assert value.tolist() == [[1, 2, 3], [4, 5.5, -6]]
    assert printed == "{ {1, 2, 3}, {4, 5.5, -6} }"
    value, _ = constant("s32[2,2,2]", "{ { {1, 2}, {3, 4} }, { {5, 6}, {7, 8} } }")
    assert value.tolist() == [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]


def test_elements_separated_by_whitespace_or_trailing_commas():
    # XLA's literal parser skips commas; what matters is the braces and the elements.
    assert constant("s32[3]", "{1 2 3}")[0].tolist() == [1, 2, 3]
    assert constant("s32[2,2]", "{{1, 2,}, {3 4},}")[0].tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("shape,text,printed", [
    ("f32[0]", "{}", "{}"),
    ("f32[0,3]", "{}", "{}"),
    ("f32[0,3]", "{  }", "{}"),
    ("f32[2,0]", "{ {}, {} }", "{ {}, {} }"),
    ("s32[1,0,2]", "{ {} }", "{ {} }"),
    ("c64[0]", "{}", "{}"),
])
def test_empty_arrays(shape, text, printed):
    value, out = constant(shape, text)
    assert value.size == 0 and value.shape == parse_shape(shape).dims
    assert out == printed


def test_layout_does_not_change_literal_order():
    value, printed = constant("f32[2,2]{0,1}", "{ {1, 2}, {3, 4} }")
    assert value.tolist() == [[1, 2], [3, 4]]


# ---- special floats ----------------------------------------------------------------------

@pytest.mark.parametrize("etype", ["f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e3m4"])
def test_inf_nan_and_signs_kept(etype):
    value, printed = constant(f"{etype}[6]", "{inf, -inf, nan, -nan, 0, -0}")
    f = value.astype(np.float64)
    assert np.isposinf(f[0]) and np.isneginf(f[1]) and np.isnan(f[2]) and np.isnan(f[3])
    assert not np.signbit(f[2]) and np.signbit(f[3]) and not np.signbit(f[4]) and np.signbit(f[5])
    assert printed == "{inf, -inf, nan, -nan, 0, -0}"


@pytest.mark.parametrize("etype", ["f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz"])
def test_nan_without_inf_types(etype):
    value, printed = constant(f"{etype}[2]", "{nan, 1}")
    assert np.isnan(value.astype(np.float32)[0])


def test_nan_payloads_bitwise():
    value, printed = constant("f32[3]", "{nan(0x1), -nan(0x7fffff), nan}")
    assert bits(value).tolist() == [0x7F800001, 0xFFFFFFFF, 0x7FC00000]
    assert printed == "{nan(0x1), -nan(0x7fffff), nan}"
    value, printed = constant("f64[]", "nan(0x123)")
    assert bits(value).tolist() == [0x7FF0000000000123] and printed == "nan(0x123)"
    value, printed = constant("c64[]", "(nan(0x2), -nan)")
    assert bits(value).tolist() == [0x7F800002, 0xFFC00000]


def test_nan_payload_out_of_range_is_an_error():
    with pytest.raises(HloSyntaxError, match="payload"):
        parse_module("HloModule m\n\nENTRY e {\n  ROOT c = f16[] constant(nan(0x400))\n}\n")
    with pytest.raises(HloSyntaxError, match="payload"):
        parse_module("HloModule m\n\nENTRY e {\n  ROOT c = f8e4m3fn[] constant(nan(0x1))\n}\n")


# ---- complex -----------------------------------------------------------------------------

def test_complex_scalars_and_arrays():
    value, printed = constant("c64[2,2]", "{ {(1, 2), (3.5, -4)}, {(0, 0), (-1e+10, 1e-10)} }")
    assert_same(value, np.array([[1 + 2j, 3.5 - 4j], [0j, -1e10 + 1e-10j]], np.complex64))
    assert printed == "{ {(1, 2), (3.5, -4)}, {(0, 0), (-1e+10, 1e-10)} }"
    value, printed = constant("c128[3]", "{(inf, nan), (-inf, -0), (-nan, 5e-324)}")
    assert np.isposinf(value[0].real) and np.isnan(value[0].imag)
    assert np.isneginf(value[1].real) and np.signbit(value[1].imag)
    assert np.isnan(value[2].real) and np.signbit(value[2].real) and value[2].imag == 5e-324
    assert printed == "{(inf, nan), (-inf, -0), (-nan, 5e-324)}"


# ---- tuples ------------------------------------------------------------------------------

def test_tuple_literals_nested():
    value, printed = constant("(f32[], (s32[2], pred[]), (), c64[1])",
                              "(1.5, ({1, 2}, true), (), {(1, -1)})")
    assert isinstance(value, tuple) and len(value) == 4
    assert value[0] == np.float32(1.5)
    assert value[1][0].tolist() == [1, 2] and value[1][1] == np.bool_(True)
    assert value[2] == ()
    assert value[3].tolist() == [1 - 1j]
    assert printed == "(1.5, ({1, 2}, true), (), {(1, -1)})"


def test_empty_tuple_literal():
    value, printed = constant("()", "()")
    assert value == () and printed == "()"


def test_elided_literal_kept():
    text = "HloModule m\n\nENTRY e {\n  ROOT c = f32[1000] constant({...})\n}\n"
    m = parse_module(text)
    assert m.entry.root.literal_elided and m.entry.root.literal is None
    assert "constant({...})" in module_to_text(m)


def test_comment_inside_literal():
    value, _ = constant("s32[6]", "{1, 2, 3, 4, 5, /*index=5*/6}")
    assert value.tolist() == [1, 2, 3, 4, 5, 6]


# ---- exhaustive and random round trips ---------------------------------------------------

NARROW = ["f16", "bf16", "f8e5m2", "f8e4m3", "f8e4m3fn", "f8e4m3b11fnuz", "f8e3m4", "f8e5m2fnuz",
          "f8e4m3fnuz", "f8e8m0fnu", "s4", "u4", "s2", "u2", "s8", "u8"]


@pytest.mark.parametrize("etype", NARROW)
def test_every_bit_pattern_round_trips(etype):
    dt = dtypes.ELEMENT_DTYPES[etype]
    nbits = dtypes.bit_width(etype) if etype[0] in "su" else dt.itemsize * 8
    if etype[0] in "su":
        lo = -(1 << (nbits - 1)) if etype[0] == "s" else 0
        arr = np.arange(lo, lo + (1 << nbits)).astype(dt)
    else:
        arr = np.arange(1 << nbits, dtype=f"u{dt.itemsize}").view(dt)
    shape = Shape.array(etype, arr.shape)
    back = parse_literal(format_literal(arr, shape), shape)
    assert_same(arr, back)


def test_f4e2m1fn_every_value():
    arr = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    shape = Shape.array("f4e2m1fn", arr.shape)
    assert_same(arr, parse_literal(format_literal(arr, shape), shape))


@pytest.mark.parametrize("etype,utype", [("f32", np.uint32), ("f64", np.uint64),
                                         ("c64", np.uint32), ("c128", np.uint64)])
def test_random_bit_patterns_round_trip(etype, utype):
    rng = np.random.default_rng(7)
    raw = rng.integers(0, np.iinfo(utype).max, 4096, dtype=utype, endpoint=True)
    arr = raw.view(dtypes.ELEMENT_DTYPES[etype])
    shape = Shape.array(etype, (arr.size // 8, 8))
    arr = arr.reshape(shape.dims)
    assert_same(arr, parse_literal(format_literal(arr, shape), shape))


@pytest.mark.parametrize("etype", ["s64", "u64", "s32", "u32", "s16", "u16"])
def test_integer_extremes_round_trip(etype):
    dt = dtypes.ELEMENT_DTYPES[etype]
    info = np.iinfo(dt)
    arr = np.array([info.min, info.max, 0, info.min + 1, info.max - 1], dtype=dt)
    shape = Shape.array(etype, arr.shape)
    text = format_literal(arr, shape)
    assert text == "{" + ", ".join(str(int(x)) for x in arr) + "}"
    assert_same(arr, parse_literal(text, shape))


# ---- values XLA rejects --------------------------------------------------------------------

@pytest.mark.parametrize("shape,literal,message", [
    ("s8[2]", "{1, 128}", "value 128 is out of range for s8 [-128, 127]"),
    ("u8[]", "-1", "value -1 is out of range for u8"),
    ("s4[]", "8", "out of range for s4"),
    ("u64[]", "18446744073709551616", "out of range for u64"),
    ("s64[]", "-9223372036854775809", "out of range for s64"),
    ("f16[]", "70000", "value 70000 is out of range for f16"),
    ("f32[2]", "{1, 1e39}", "value 1e39 is out of range for f32"),
    ("f8e4m3fn[]", "1000", "out of range for f8e4m3fn"),
    ("f32[2]", "{1, x}", "invalid floating-point literal 'x'"),
    ("s32[2]", "{1, 2.5}", "invalid s32 literal '2.5'"),
    ("pred[]", "maybe", "invalid pred literal 'maybe'"),
    ("f32[2]", "{1, 2, 3}", "too many elements in dimension 0"),
    ("f32[3]", "{1, 2}", "expected 3 elements in dimension 0, found 2"),
    ("f32[2,2]", "{ {1, 2, 3}, {4} }", "too many elements in dimension 1 of sub-array [0]"),
    ("f32[2,2]", "{ {1, 2}, {4} }", "expected 2 elements in dimension 1 of sub-array [1], found 1"),
    ("f32[2,2]", "{1, 2, 3, 4}", "nesting depth 1"),
    ("f32[2]", "{ {1, 2} }", "too many nested '{'"),
    ("f32[]", "{1}", "written without braces"),
    ("f32[2]", "1, 2", "must start with '{'"),
    ("f32[2]", "{1, 2", "unterminated '{'"),
    ("f32[2]", "{1, 2}}", "unexpected '}' after the end of the literal"),
    ("c64[]", "1", "complex elements are written (real, imag)"),
    ("f32[1]", "{(1, 2)}", "parentheses are only for complex elements"),
    ("(f32[], s32[])", "(1)", "tuple literal has 1 elements"),
    ("(f32[], s32[])", "1, 2", "parenthesised literal"),
    ("f32[]", "", "has no literal"),
])
def test_bad_literals(shape, literal, message):
    text = f"HloModule m\n\nENTRY e {{\n  ROOT c = {shape} constant({literal})\n}}\n"
    with pytest.raises(HloSyntaxError) as info:
        parse_module(text, "bad.hlo")
    assert message in str(info.value)
    assert str(info.value).startswith("bad.hlo:4:")


def test_bad_element_position_is_exact():
    text = "HloModule m\n\nENTRY e {\n  ROOT c = f32[4] constant({1, 2, oops, 4})\n}\n"
    with pytest.raises(HloSyntaxError) as info:
        parse_module(text, "x.hlo")
    err = info.value
    assert (err.line, err.column) == (4, text.splitlines()[3].index("oops") + 1)
    text = "HloModule m\n\nENTRY e {\n  ROOT c = (f32[], s8[2]) constant((1, {2, 999}))\n}\n"
    with pytest.raises(HloSyntaxError) as info:
        parse_module(text, "x.hlo")
    assert info.value.column == text.splitlines()[3].index("999") + 1


def test_parse_literal_direct_api_offsets():
    with pytest.raises(LiteralError) as info:
        parse_literal("  {1, 2, bad}", Shape.array("f32", (3,)))
    assert info.value.offset == len("  {1, 2, ")
    assert math.isclose(float(parse_literal(" 2.5 ", Shape.array("f32"))), 2.5)
