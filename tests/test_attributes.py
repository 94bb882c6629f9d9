"""Every attribute kind XLA prints: parsed to its typed value, printed, re-parsed, and the
printing is a fixed point.  Syntax as xla/hlo/parser/hlo_parser.cc reads it and
xla/hlo/ir/hlo_instruction.cc (and friends) print it."""
from __future__ import annotations

import numpy as np
import pytest

from xlaplug.hlo import HloSyntaxError
from xlaplug.hlo.attr_types import (BufferDonor, ComputationLayout, ConvDims, InputOutputAlias,
                                    OutputOperandAliasing, PadDim, Padding, Raw, ReplicaGroups,
                                    ResultAccuracy, Sharding, SliceDim, SliceRanges, Window,
                                    WindowDim, Word)
from xlaplug.hlo.text.attributes import format_value
from xlaplug.hlo.ir import UNBOUNDED, Computation, Instruction, Shape
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.text.printer import module_to_text

ADD = """add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

"""
NEG = """neg {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}

"""


def module(body: str, comps: str = "", header: str = "") -> str:
    return f"HloModule m{header}\n\n{comps}ENTRY e {{\n{body}\n}}\n"


def roundtrip(text: str):
    """Parse, print, parse again, print again: the two printings must be identical."""
    m1 = parse_module(text, "in.hlo")
    p1 = module_to_text(m1)
    m2 = parse_module(p1, "printed.hlo")
    p2 = module_to_text(m2)
    assert p1 == p2, f"printing is not a fixed point:\n{p1}\n---\n{p2}"
    return m1, p1, m2


def _instr(m, name: str) -> Instruction:
    for c in [m.entry] + m.computations:  # the entry's names first
        for i in c.instructions:
            if i.name == name:
                return i
    raise KeyError(name)


def check(text: str, instr: str, attr: str, expected):
    """The attribute's typed value is `expected` (or passes it, if callable) before and after
    a print/parse round trip; returns the printed module text."""
    m1, p1, m2 = roundtrip(text)
    for m in (m1, m2):
        v = _instr(m, instr).attrs[attr]
        if callable(expected) and not isinstance(expected, type):
            assert expected(v), f"{attr}={v!r}"
        else:
            assert v == expected, f"{attr}={v!r}, expected {expected!r}"
    a, b = _instr(m1, instr).attrs[attr], _instr(m2, instr).attrs[attr]
    assert format_value(attr, a) == format_value(attr, b)
    return p1


def line_of(printed: str, name: str) -> str:
    return next(ln for ln in printed.splitlines() if ln.strip().startswith((name + " ", "ROOT " + name + " ")))


# ---- dimension lists and plain scalars ---------------------------------------------------

@pytest.mark.parametrize("body,instr,attr,expected", [
    ("p = f32[4,3] parameter(0)\n  ROOT r = f32[3,4] transpose(p), dimensions={1,0}",
     "r", "dimensions", (1, 0)),
    ("p = f32[3] parameter(0)\n  ROOT r = f32[4,3] broadcast(p), dimensions={1}",
     "r", "dimensions", (1,)),
    ("p = f32[] parameter(0)\n  ROOT r = f32[4,3] broadcast(p), dimensions={}",
     "r", "dimensions", ()),
    ("p = (f32[2], s32[]) parameter(0)\n  ROOT r = s32[] get-tuple-element(p), index=1",
     "r", "index", 1),
    ("ROOT r = s32[4,5] iota(), iota_dimension=1", "r", "iota_dimension", 1),
    ("p = f32[8] parameter(0)\n  ROOT r = f32[8] reduce-precision(p), exponent_bits=5, mantissa_bits=10",
     "r", "exponent_bits", 5),
    ("p = f32[8] parameter(0)\n  ROOT r = f32[8] reduce-precision(p), exponent_bits=5, mantissa_bits=10",
     "r", "mantissa_bits", 10),
    ("p = f32[8,4] parameter(0)\n  ROOT r = (f32[8,2], s32[8,2]) topk(p), k=2, largest=true",
     "r", "k", 2),
    ("p = f32[8,4] parameter(0)\n  ROOT r = (f32[8,2], s32[8,2]) topk(p), k=2, largest=false",
     "r", "largest", False),
    ("p = f32[8] parameter(0)\n  ROOT r = f32[8] sort(p), dimensions={0}, is_stable=true, to_apply=lt",
     "r", "is_stable", True),
    ("p = f32[4] parameter(0)\n  ROOT r = f32[4] reverse(p), dimensions={0}", "r", "dimensions", (0,)),
    ("p = f32[4,6] parameter(0)\n  ROOT r = f32[4,6] dynamic-reshape(p)", "r", None, None),
    ("p = c64[8,8] parameter(0)\n  ROOT r = c64[8,8] fft(p), fft_type=FFT, fft_length={8}",
     "r", "fft_type", "FFT"),
    ("p = c64[8,8] parameter(0)\n  ROOT r = c64[8,8] fft(p), fft_type=IFFT, fft_length={8,8}",
     "r", "fft_length", (8, 8)),
    ("p = f32[8,8] parameter(0)\n  ROOT r = f32[8,5] fft(p), fft_type=RFFT, fft_length={8}",
     "r", "fft_type", "RFFT"),
    ("ROOT r = s32[] rng-get-and-update-state(), delta=4096", "r", "delta", 4096),
    ("p = f32[4,6] parameter(0)\n  ROOT r = f32[24] reshape(p), inferred_dimension=0",
     "r", "inferred_dimension", 0),
])
def test_scalar_and_list_attributes(body, instr, attr, expected):
    comps = """lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}

"""
    text = module(body, comps)
    if attr is None:
        roundtrip(text)
        return
    check(text, instr, attr, expected)


def test_word_attributes_are_words():
    text = module("p = f32[4,4] parameter(0)\n"
                  "  ROOT r = f32[4,4] triangular-solve(p, p), left_side=true, lower=true, "
                  "unit_diagonal=true, transpose_a=ADJOINT")
    printed = check(text, "r", "transpose_a", "ADJOINT")
    assert isinstance(parse_module(text).entry.root.attrs["transpose_a"], Word)
    assert "left_side=true, lower=true, unit_diagonal=true, transpose_a=ADJOINT" in printed
    for flag in ("left_side", "lower", "unit_diagonal"):
        check(text, "r", flag, True)


def test_cholesky_lower():
    text = module("p = f32[4,4] parameter(0)\n  ROOT r = f32[4,4] cholesky(p), lower=true")
    check(text, "r", "lower", True)


# ---- called computations -----------------------------------------------------------------

def _is_comp(name):
    return lambda v: isinstance(v, Computation) and v.name == name


def _is_comps(*names):
    return lambda v: [c.name for c in v] == list(names) and all(isinstance(c, Computation) for c in v)


def test_to_apply():
    text = module("p = f32[4,4] parameter(0)\n  z = f32[] constant(0)\n"
                  "  ROOT r = f32[4] reduce(p, z), dimensions={1}, to_apply=add", ADD)
    printed = check(text, "r", "to_apply", _is_comp("add"))
    assert "dimensions={1}, to_apply=add" in printed


def test_calls_single_prints_bare():
    text = module("p = f32[4] parameter(0)\n  ROOT r = f32[4] fusion(p), kind=kLoop, calls=neg", NEG)
    printed = check(text, "r", "calls", _is_comps("neg"))
    assert "kind=kLoop, calls=neg" in printed
    check(text, "r", "kind", "kLoop")


@pytest.mark.parametrize("kind", ["kLoop", "kInput", "kOutput", "kCustom"])
def test_fusion_kinds(kind):
    text = module(f"p = f32[4] parameter(0)\n  ROOT r = f32[4] fusion(p), kind={kind}, calls=neg",
                  NEG)
    check(text, "r", "kind", kind)


def test_calls_list_and_called_computations():
    neg2 = NEG.replace("neg {", "neg2 {")
    text = module("p = f32[4] parameter(0)\n"
                  "  c = f32[4] custom-call(p), custom_call_target=\"x\", called_computations={neg, neg2}\n"
                  "  ROOT r = f32[4] custom-call(c), custom_call_target=\"y\", calls={neg, %neg2}",
                  NEG + neg2)
    printed = check(text, "c", "called_computations", _is_comps("neg", "neg2"))
    check(text, "r", "calls", _is_comps("neg", "neg2"))
    assert "called_computations={neg, neg2}" in printed
    assert "calls={neg, neg2}" in printed


def test_while_condition_body():
    comps = """cond {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[]) tuple(j)
}

"""
    text = module("z = s32[] constant(0)\n  t = (s32[]) tuple(z)\n"
                  "  ROOT w = (s32[]) while(t), condition=cond, body=body", comps)
    check(text, "w", "condition", _is_comp("cond"))
    printed = check(text, "w", "body", _is_comp("body"))
    assert "condition=cond, body=body" in printed


def test_conditional_branches():
    comps = """b0 {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}

b1 {
  a = f32[] parameter(0)
  ROOT n = f32[] abs(a)
}

"""
    text = module("i = s32[] parameter(0)\n  x = f32[] parameter(1)\n  k = pred[] parameter(2)\n"
                  "  c = f32[] conditional(i, x, x), branch_computations={b0, b1}\n"
                  "  ROOT d = f32[] conditional(k, c, c), true_computation=b0, false_computation=b1",
                  comps)
    printed = check(text, "c", "branch_computations", _is_comps("b0", "b1"))
    check(text, "d", "true_computation", _is_comp("b0"))
    check(text, "d", "false_computation", _is_comp("b1"))
    assert "branch_computations={b0, b1}" in printed
    assert "true_computation=b0, false_computation=b1" in printed


def test_select_and_scatter():
    comps = """ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}

""" + ADD
    text = module("p = f32[8] parameter(0)\n  s = f32[4] parameter(1)\n  z = f32[] constant(0)\n"
                  "  ROOT r = f32[8] select-and-scatter(p, s, z), window={size=2 stride=2}, "
                  "select=ge, scatter=add", comps)
    check(text, "r", "select", _is_comp("ge"))
    check(text, "r", "scatter", _is_comp("add"))


# ---- windows, convolutions, slices, padding ----------------------------------------------

def test_window_every_field():
    text = module("p = f32[8,8] parameter(0)\n  z = f32[] constant(0)\n"
                  "  ROOT r = f32[8,8] reduce-window(p, z), window={size=3x2 stride=2x1 "
                  "pad=1_-1x0_2 lhs_dilate=2x1 rhs_dilate=1x3}, to_apply=add", ADD)
    expected = Window((WindowDim(3, 2, 1, -1, 2, 1, False), WindowDim(2, 1, 0, 2, 1, 3, False)))
    printed = check(text, "r", "window", expected)
    assert "window={size=3x2 stride=2x1 pad=1_-1x0_2 lhs_dilate=2x1 rhs_dilate=1x3}" in printed


def test_window_any_order_and_canonical_print():
    text = module("p = f32[8] parameter(0)\n  z = f32[] constant(0)\n"
                  "  ROOT r = f32[4] reduce-window(p, z), window={stride=2 size=2 pad=0_0}, "
                  "to_apply=add", ADD)
    printed = check(text, "r", "window", Window((WindowDim(2, 2),)))
    assert "window={size=2 stride=2}" in printed


def test_convolution_dim_labels_and_rhs_reversal():
    text = module("l = f32[1,8,8,3] parameter(0)\n  k = f32[3,3,3,16] parameter(1)\n"
                  "  ROOT c = f32[1,8,8,16] convolution(l, k), window={size=3x3 pad=1_1x1_1 "
                  "rhs_reversal=1x0}, dim_labels=b01f_01io->b01f, feature_group_count=1, "
                  "batch_group_count=1")
    printed = check(text, "c", "dim_labels",
                    lambda v: isinstance(v, ConvDims) and (v.input_batch, v.input_feature,
                                                           v.input_spatial) == (0, 3, (1, 2))
                    and (v.kernel_input_feature, v.kernel_output_feature, v.kernel_spatial)
                    == (2, 3, (0, 1)) and v.output_spatial == (1, 2))
    check(text, "c", "window", lambda w: [d.reversal for d in w.dims] == [True, False])
    assert "dim_labels=b01f_01io->b01f" in printed
    assert "rhs_reversal=1x0" in printed
    check(text, "c", "feature_group_count", 1)
    check(text, "c", "batch_group_count", 1)


def test_dim_labels_other_orders():
    text = module("l = f32[1,3,8,8] parameter(0)\n  k = f32[16,3,3,3] parameter(1)\n"
                  "  ROOT c = f32[1,16,8,8] convolution(l, k), window={size=3x3 pad=1_1x1_1}, "
                  "dim_labels=bf01_oi01->bf01")
    check(text, "c", "dim_labels", lambda v: v.input_feature == 1 and v.kernel_output_feature == 0
          and str(v) == "bf01_oi01->bf01")


def test_slice_with_strides():
    text = module("p = f32[8,6] parameter(0)\n  ROOT r = f32[4,2] slice(p), slice={[0:8:2], [1:3]}")
    printed = check(text, "r", "slice", SliceRanges((SliceDim(0, 8, 2), SliceDim(1, 3, 1))))
    assert "slice={[0:8:2], [1:3]}" in printed


def test_padding_negative_and_interior():
    text = module("p = f32[4,4] parameter(0)\n  z = f32[] constant(0)\n"
                  "  ROOT r = f32[4,8] pad(p, z), padding=0_0x-1_2_1")
    printed = check(text, "r", "padding", Padding((PadDim(0, 0, 0), PadDim(-1, 2, 1))))
    assert "padding=0_0_0x-1_2_1" in printed


def test_padding_without_interior_prints_two_numbers():
    text = module("p = f32[4] parameter(0)\n  z = f32[] constant(0)\n"
                  "  ROOT r = f32[7] pad(p, z), padding=1_2")
    printed = check(text, "r", "padding", Padding((PadDim(1, 2, 0),)))
    assert "padding=1_2" in printed


# ---- dot, gather, scatter ----------------------------------------------------------------

def test_dot_dimension_numbers():
    text = module("a = f32[2,3,4] parameter(0)\n  b = f32[2,4,5] parameter(1)\n"
                  "  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                  "rhs_batch_dims={0}, rhs_contracting_dims={1}, operand_precision={high,default}, "
                  "algorithm=dot_bf16_bf16_f32")
    printed = check(text, "d", "lhs_batch_dims", (0,))
    check(text, "d", "lhs_contracting_dims", (2,))
    check(text, "d", "rhs_batch_dims", (0,))
    check(text, "d", "rhs_contracting_dims", (1,))
    check(text, "d", "operand_precision", ("high", "default"))
    check(text, "d", "algorithm", "dot_bf16_bf16_f32")
    assert ("lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
            "rhs_contracting_dims={1}, operand_precision={high,default}") in printed


def test_ragged_dot_dims():
    text = module("a = f32[8,4] parameter(0)\n  b = f32[2,4,5] parameter(1)\n"
                  "  g = s64[2] parameter(2)\n"
                  "  ROOT d = f32[8,5] ragged-dot(a, b, g), lhs_contracting_dims={1}, "
                  "rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}")
    check(text, "d", "lhs_ragged_dims", (0,))
    check(text, "d", "rhs_group_dims", (0,))


def test_gather_dimension_numbers_with_batching():
    text = module("p = f32[2,5,3] parameter(0)\n  i = s32[2,4,1] parameter(1)\n"
                  "  ROOT g = f32[2,4,3] gather(p, i), offset_dims={2}, collapsed_slice_dims={1}, "
                  "start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, "
                  "index_vector_dim=2, slice_sizes={1,1,3}, indices_are_sorted=true")
    printed = check(text, "g", "offset_dims", (2,))
    check(text, "g", "collapsed_slice_dims", (1,))
    check(text, "g", "start_index_map", (1,))
    check(text, "g", "operand_batching_dims", (0,))
    check(text, "g", "start_indices_batching_dims", (0,))
    check(text, "g", "index_vector_dim", 2)
    check(text, "g", "slice_sizes", (1, 1, 3))
    check(text, "g", "indices_are_sorted", True)
    assert "operand_batching_dims={0}, start_indices_batching_dims={0}" in printed


def test_scatter_dimension_numbers_with_batching():
    text = module("p = f32[2,5,3] parameter(0)\n  i = s32[2,4,1] parameter(1)\n"
                  "  u = f32[2,4,3] parameter(2)\n"
                  "  ROOT s = f32[2,5,3] scatter(p, i, u), update_window_dims={2}, "
                  "inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, "
                  "input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, "
                  "indices_are_sorted=true, unique_indices=true, to_apply=add", ADD)
    check(text, "s", "update_window_dims", (2,))
    check(text, "s", "inserted_window_dims", (1,))
    check(text, "s", "scatter_dims_to_operand_dims", (1,))
    check(text, "s", "input_batching_dims", (0,))
    check(text, "s", "scatter_indices_batching_dims", (0,))
    check(text, "s", "unique_indices", True)
    check(text, "s", "to_apply", _is_comp("add"))


# ---- comparisons -------------------------------------------------------------------------

@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
@pytest.mark.parametrize("ctype", [None, "FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"])
def test_comparison_direction_and_type(direction, ctype):
    extra = f", type={ctype}" if ctype else ""
    text = module("a = f32[4] parameter(0)\n  b = f32[4] parameter(1)\n"
                  f"  ROOT c = pred[4] compare(a, b), direction={direction}{extra}")
    printed = check(text, "c", "direction", direction)
    if ctype:
        check(text, "c", "type", ctype)
    assert f"direction={direction}{extra}" in printed


# ---- shardings ---------------------------------------------------------------------------

SHARDINGS = [
    ("{replicated}", lambda s: s.kind == "replicated"),
    ("{maximal device=0}", lambda s: s.kind == "maximal" and s.device == 0),
    ("{maximal device=3}", lambda s: s.device == 3),
    ("{devices=[2,2]0,1,2,3}",
     lambda s: s.kind == "tiled" and s.tile_dims == (2, 2) and s.devices == (0, 1, 2, 3)),
    ("{devices=[2,2]<=[4]}",
     lambda s: s.iota_reshape == (4,) and s.iota_perm is None and s.device_ids() == (0, 1, 2, 3)),
    ("{devices=[4,2]<=[2,4]T(1,0)}",
     lambda s: s.tile_dims == (4, 2) and s.iota_reshape == (2, 4) and s.iota_perm == (1, 0)
     and s.device_ids() == (0, 4, 1, 5, 2, 6, 3, 7)),
    ("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",
     lambda s: s.last_tile_dim_replicate and s.tile_dims == (2, 1, 2)),
    ("{devices=[2,1,2]<=[4] last_tile_dim_replicate}", lambda s: s.last_tile_dim_replicate),
    ("{devices=[2,1,2]<=[4] last_tile_dims={manual}}",
     lambda s: s.last_tile_dims == ("manual",) and not s.last_tile_dim_replicate),
    ("{devices=[2,2,2]<=[8] last_tile_dims={manual, replicated}}",
     lambda s: s.last_tile_dims == ("manual", "replicated")),
    ("{manual}", lambda s: s.kind == "manual"),
    ("{unknown}", lambda s: s.kind == "unknown"),
    ("{unreduced}", lambda s: s.kind == "unreduced"),
    ("{replicated metadata={op_name=\"a\"}}",
     lambda s: s.kind == "replicated" and s.metadata == '{op_name="a"}'),
    ("{devices=[2]0,1 shard_as 1}", lambda s: s.shard_group == "shard_as 1"),
    ("{devices=[2]0,1 shard_like 2}", lambda s: s.shard_group == "shard_like 2"),
]


@pytest.mark.parametrize("text,pred", SHARDINGS, ids=[s for s, _ in SHARDINGS])
def test_sharding_forms(text, pred):
    src = module(f"p = f32[4,4] parameter(0), sharding={text}\n  ROOT r = f32[4,4] copy(p)")
    printed = check(src, "p", "sharding", lambda s: isinstance(s, Sharding) and pred(s))
    assert f"sharding={text}" in printed  # already canonical: printed unchanged


def test_sharding_canonicalises_spacing_and_order():
    src = module("p = f32[4,4] parameter(0), sharding={ devices=[2,2] 0,1,2,3  }\n"
                 "  q = f32[4] parameter(1), sharding={device=1 maximal}\n"
                 "  ROOT r = f32[4,4] copy(p)")
    _, printed, _ = roundtrip(src)
    assert "sharding={devices=[2,2]0,1,2,3}" in printed
    assert "sharding={maximal device=1}" in printed


def test_tuple_shardings():
    src = module("p = (f32[4], f32[4]) parameter(0), sharding={{replicated}, {devices=[2]0,1}}\n"
                 "  ROOT r = (f32[4], f32[4]) copy(p)")
    printed = check(src, "p", "sharding",
                    lambda s: s.is_tuple and [e.kind for e in s.elements] == ["replicated", "tiled"])
    assert "sharding={{replicated}, {devices=[2]0,1}}" in printed


def test_long_tuple_sharding_index_comments():
    leaves = ", ".join(["{replicated}"] * 4 + ["/*index=4*/{maximal device=0}",
                                                "/*index=5*/{manual}", "{unknown}"])
    src = module(f"p = (f32[], f32[], f32[], f32[], f32[], f32[], f32[]) parameter(0), "
                 f"sharding={{{leaves}}}\n  ROOT r = f32[] get-tuple-element(p), index=0")
    printed = check(src, "p", "sharding", lambda s: len(s.elements) == 7
                    and s.elements[5].kind == "manual")
    # XLA's own comment placement: every fifth element.
    assert ("sharding={{replicated}, {replicated}, {replicated}, {replicated}, "
            "{maximal device=0}, /*index=5*/{manual}, {unknown}}") in printed


def test_empty_tuple_sharding():
    src = module("p = () parameter(0), sharding={}\n  ROOT r = f32[] constant(1)")
    check(src, "p", "sharding", lambda s: s.is_tuple and s.elements == ())


def test_named_sharding_kept_verbatim():
    src = module("p = f32[4,4] parameter(0), sharding={mesh[a=2,b=2], [{a},{b}]}\n"
                 "  ROOT r = f32[4,4] copy(p)")
    printed = check(src, "p", "sharding", lambda s: s.kind == "named")
    assert "sharding={mesh[a=2,b=2], [{a},{b}]}" in printed


# ---- collectives -------------------------------------------------------------------------

def test_replica_groups_explicit():
    text = module("p = f32[8] parameter(0)\n"
                  "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1},{2,3}}, to_apply=add, "
                  "channel_id=1, use_global_device_ids=true", ADD)
    printed = check(text, "r", "replica_groups", ReplicaGroups(groups=((0, 1), (2, 3))))
    check(text, "r", "channel_id", 1)
    check(text, "r", "use_global_device_ids", True)
    assert "replica_groups={{0,1},{2,3}}, to_apply=add, channel_id=1, use_global_device_ids=true" in printed


def test_replica_groups_empty():
    text = module("p = f32[8] parameter(0)\n"
                  "  ROOT r = f32[16] all-gather(p), replica_groups={}, dimensions={0}")
    check(text, "r", "replica_groups", ReplicaGroups(groups=()))


@pytest.mark.parametrize("iota,groups", [
    ("[2,2]<=[4]", ((0, 1), (2, 3))),
    ("[4,2]<=[2,4]T(1,0)", ((0, 4), (1, 5), (2, 6), (3, 7))),
    ("[1,4]<=[4]", ((0, 1, 2, 3),)),
])
def test_replica_groups_iota(iota, groups):
    text = module("p = f32[8] parameter(0)\n"
                  f"  ROOT r = f32[8] all-reduce(p), replica_groups={iota}, to_apply=add", ADD)
    printed = check(text, "r", "replica_groups",
                    lambda v: v.iota == iota and v.expanded() == groups)
    assert f"replica_groups={iota}, to_apply=add" in printed


def test_collective_ops_attributes():
    text = module("p = f32[8] parameter(0)\n"
                  "  a = f32[16] all-gather(p), channel_id=3, replica_groups={{0,1}}, dimensions={0}, "
                  "constrain_layout=true, use_global_device_ids=true\n"
                  "  b = f32[8] reduce-scatter(a), replica_groups=[1,2]<=[2], dimensions={0}, to_apply=add\n"
                  "  c = f32[8] all-to-all(b), replica_groups={{0,1}}, dimensions={0}\n"
                  "  d = f32[8] collective-permute(c), source_target_pairs={{0,1},{1,0}}, channel_id=7\n"
                  "  e = f32[8] collective-broadcast(d), replica_groups={{0,1}}\n"
                  "  s = (f32[8], f32[8]) all-reduce-start(e), replica_groups={{0,1}}, to_apply=add\n"
                  "  ROOT f = f32[8] all-reduce-done(s)", ADD)
    check(text, "a", "constrain_layout", True)
    check(text, "a", "channel_id", 3)
    check(text, "b", "dimensions", (0,))
    check(text, "d", "source_target_pairs", ((0, 1), (1, 0)))
    check(text, "d", "channel_id", 7)


def test_source_target_pairs():
    text = module("p = f32[8] parameter(0)\n"
                  "  ROOT r = f32[8] collective-permute(p), source_target_pairs={{0,1},{1,2},{2,0}}")
    printed = check(text, "r", "source_target_pairs", ((0, 1), (1, 2), (2, 0)))
    assert "source_target_pairs={{0,1},{1,2},{2,0}}" in printed


def test_combined_collective_permute_slice_sizes_list_of_lists():
    text = module("p = f32[8] parameter(0)\n  o = f32[8] parameter(1)\n  i = s32[] parameter(2)\n"
                  "  ROOT r = f32[8] collective-permute(p, o, i, i), source_target_pairs={{0,1}}, "
                  "slice_sizes={{4},{4}}")
    printed = check(text, "r", "slice_sizes", ((4,), (4,)))
    assert "slice_sizes={{4},{4}}" in printed


# ---- metadata, frontend attributes, backend config ---------------------------------------

def test_metadata_every_field():
    md = ('{op_type="add" op_name="jit(f)/add" source_file="/a/b.py" source_line=12 '
          'source_end_line=14 source_column=2 source_end_column=9 profile_type={1,2} '
          'deduplicated_name="fusion.1" preserve_layout=true scheduling_name="s" stack_frame_id=3}')
    text = module(f"ROOT p = f32[8] parameter(0), metadata={md}")
    printed = check(text, "p", "metadata", {
        "op_type": "add", "op_name": "jit(f)/add", "source_file": "/a/b.py", "source_line": 12,
        "source_end_line": 14, "source_column": 2, "source_end_column": 9, "profile_type": (1, 2),
        "deduplicated_name": "fusion.1", "preserve_layout": True, "scheduling_name": "s",
        "stack_frame_id": 3})
    assert f"metadata={md}" in printed


def test_metadata_escapes_round_trip():
    text = module('ROOT p = f32[8] parameter(0), metadata={op_name="a\\"b\\\\c\\n\\303\\251" '
                  'source_file="x y.py"}')
    printed = check(text, "p", "metadata", {"op_name": 'a"b\\c\né', "source_file": "x y.py"})
    assert 'op_name="a\\"b\\\\c\\né"' in printed


def test_frontend_attributes():
    text = module('ROOT p = f32[8] parameter(0), frontend_attributes={_xla_compute_type="host",'
                  'b="1"}')
    printed = check(text, "p", "frontend_attributes", {"_xla_compute_type": "host", "b": "1"})
    assert 'frontend_attributes={_xla_compute_type="host",b="1"}' in printed


def test_frontend_attributes_composite_braced_values():
    attrs = ('{composite.attributes={n = 1 : i32, tensor = dense<1> : tensor<i32>},'
             'composite.name="foo.bar",composite.version="1"}')
    text = module("a = f32[] parameter(0)\n"
                  f"  ROOT c = f32[] call(a), to_apply=neg, is_composite=true, "
                  f"frontend_attributes={attrs}",
                  NEG.replace("f32[4]", "f32[]"))
    printed = check(text, "c", "frontend_attributes", {
        "composite.attributes": Raw("{n = 1 : i32, tensor = dense<1> : tensor<i32>}"),
        "composite.name": "foo.bar", "composite.version": "1"})
    check(text, "c", "is_composite", True)
    assert f"frontend_attributes={attrs}" in printed


@pytest.mark.parametrize("config,expected", [
    ('"opaque text"', "opaque text"),
    ('"line1\\nline2 \\"q\\""', 'line1\nline2 "q"'),
    ('"{\\"k\\": 1, \\"l\\": [1, 2]}"', '{"k": 1, "l": [1, 2]}'),   # JSON in a string
    ('{alpha = 2.000000e+00 : f32, name = "x", dims = array<i64: 1, 2>}',
     Raw('{alpha = 2.000000e+00 : f32, name = "x", dims = array<i64: 1, 2>}')),  # MLIR dict
    ('{"operation_queue_id":"0","wait_on_operation_queues":[],"nested":{"a":{"b":[{"c":1}]}}}',
     Raw('{"operation_queue_id":"0","wait_on_operation_queues":[],"nested":{"a":{"b":[{"c":1}]}}}')),
    ('""', ""),
])
def test_backend_config(config, expected):
    text = module(f"p = f32[8] parameter(0)\n  ROOT r = f32[8] custom-call(p), "
                  f"custom_call_target=\"foo\", backend_config={config}")
    printed = check(text, "r", "backend_config", expected)
    if isinstance(expected, Raw):
        assert f"backend_config={config}" in printed  # verbatim


# ---- custom calls ------------------------------------------------------------------------

def test_custom_call_attributes():
    text = module("p = f32[8,4]{1,0} parameter(0)\n  q = f32[4]{0} parameter(1)\n"
                  "  ROOT r = (f32[8,4]{1,0}, f32[4]{0}) custom-call(p, q), custom_call_target=\"my.target\", "
                  "api_version=API_VERSION_TYPED_FFI, custom_call_has_side_effect=true, "
                  "operand_layout_constraints={f32[8,4]{0,1}, f32[4]{0}}, "
                  "output_to_operand_aliasing={{0}: (0, {}), {1}: (1, {})}, schedule=SCHEDULE_LATEST, "
                  "padding_type=PADDING_SAME")
    printed = check(text, "r", "custom_call_target", "my.target")
    check(text, "r", "api_version", "API_VERSION_TYPED_FFI")
    check(text, "r", "custom_call_has_side_effect", True)
    check(text, "r", "operand_layout_constraints",
          lambda v: [str(s) for s in v] == ["f32[8,4]{0,1}", "f32[4]{0}"])
    check(text, "r", "output_to_operand_aliasing",
          OutputOperandAliasing((((0,), 0, ()), ((1,), 1, ()))))
    check(text, "r", "schedule", "SCHEDULE_LATEST")
    check(text, "r", "padding_type", "PADDING_SAME")
    assert "output_to_operand_aliasing={{0}: (0, {}), {1}: (1, {})}" in printed
    assert "operand_layout_constraints={f32[8,4]{0,1}, f32[4]{0}}" in printed


@pytest.mark.parametrize("version", ["API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
                                     "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI"])
def test_custom_call_api_versions(version):
    text = module(f"ROOT r = f32[] custom-call(), custom_call_target=\"t\", api_version={version}")
    check(text, "r", "api_version", version)


def test_custom_call_literal():
    text = module("ROOT r = s32[2] custom-call(), custom_call_target=\"t\", "
                  "literal=s32[2]{0} {1, 2}, custom_call_has_side_effect=true")
    printed = check(text, "r", "literal", lambda v: str(v.shape) == "s32[2]{0}"
                    and v.value.tolist() == [1, 2])
    assert "literal=s32[2]{0} {1, 2}, custom_call_has_side_effect=true" in printed


@pytest.mark.parametrize("literal,check_value", [
    ("s32[] 5", lambda v: v.tolist() == 5),
    ("f32[] -1.5", lambda v: v.tolist() == -1.5),
    ("pred[] true", lambda v: v.tolist() is True),
    ("(s32[], f32[2]{0}) (1, {2, 3})", lambda v: v[0].tolist() == 1 and v[1].tolist() == [2, 3]),
])
def test_custom_call_literal_forms(literal, check_value):
    text = module(f"ROOT r = s32[] custom-call(), custom_call_target=\"t\", literal={literal}")
    printed = check(text, "r", "literal", lambda v: check_value(v.value))
    assert f"literal={literal}" in printed


def test_output_to_operand_aliasing_on_fusion():
    text = module("p = f32[4] parameter(0)\n"
                  "  ROOT r = f32[4] fusion(p), kind=kLoop, calls=neg, output_to_operand_aliasing={{}: (0, {})}",
                  NEG)
    printed = check(text, "r", "output_to_operand_aliasing", OutputOperandAliasing((((), 0, ()),)))
    assert "output_to_operand_aliasing={{}: (0, {})}" in printed


# ---- control, accuracy, async --------------------------------------------------------------

def test_control_predecessors():
    text = module("p = f32[4] parameter(0)\n  a = f32[4] negate(p)\n  b = f32[4] abs(p)\n"
                  "  ROOT c = f32[4] add(a, b), control-predecessors={a, %b}")
    m1, printed, m2 = roundtrip(text)
    for m in (m1, m2):
        root = m.entry.root
        assert [i.name for i in root.control_predecessors] == ["a", "b"]
        assert all(isinstance(i, Instruction) for i in root.control_predecessors)
        assert "control-predecessors" not in root.attrs
    assert "control-predecessors={a, b}" in printed


@pytest.mark.parametrize("spec,expected", [
    ("{mode=highest}", ResultAccuracy(mode="highest")),
    ("{mode=default}", ResultAccuracy(mode="default")),
    ("{tolerance={atol=0,rtol=0,ulps=1}}", ResultAccuracy(None, 0.0, 0.0, 1.0)),
    ("{tolerance={atol=1e-05,rtol=0.5,ulps=2}}", ResultAccuracy(None, 1e-05, 0.5, 2.0)),
])
def test_result_accuracy(spec, expected):
    text = module(f"p = f32[4] parameter(0)\n  ROOT r = f32[4] exponential(p), result_accuracy={spec}")
    printed = check(text, "r", "result_accuracy", expected)
    assert f"result_accuracy={spec}" in printed


def test_async_wrappers():
    comps = """wrapped {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}, execution_thread="host"

"""
    text = module("p = f32[4] parameter(0)\n"
                  "  s = ((f32[4]), f32[4], s32[]) async-start(p), async_execution_thread=\"host\", calls=wrapped\n"
                  "  u = ((f32[4]), f32[4], s32[]) async-update(s), async_execution_thread=\"host\", calls=wrapped\n"
                  "  ROOT d = f32[4] async-done(u), async_execution_thread=\"host\", calls=wrapped", comps)
    printed = check(text, "s", "calls", _is_comps("wrapped"))
    check(text, "s", "async_execution_thread", "host")
    check(text, "u", "calls", _is_comps("wrapped"))
    check(text, "d", "calls", _is_comps("wrapped"))
    m = parse_module(text)
    assert m.computation("wrapped").execution_thread == "host"
    assert 'async-start(p), async_execution_thread="host", calls=wrapped' in printed
    assert '}, execution_thread="host"' in printed


def test_async_collective_and_copy_start():
    text = module("p = f32[4] parameter(0)\n"
                  "  s = (f32[4], f32[4]) collective-permute-start(p), source_target_pairs={{0,1}}, channel_id=2\n"
                  "  d = f32[4] collective-permute-done(s)\n"
                  "  c = (f32[4], f32[4], u32[]) copy-start(d), cross_program_prefetch_index=0\n"
                  "  ROOT e = f32[4] copy-done(c)")
    check(text, "c", "cross_program_prefetch_index", 0)
    check(text, "s", "channel_id", 2)


# ---- rng, infeed/outfeed, send/recv, parameters --------------------------------------------

@pytest.mark.parametrize("dist", ["rng_uniform", "rng_normal"])
def test_rng_distribution(dist):
    text = module("a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                  f"  ROOT r = f32[4] rng(a, b), distribution={dist}")
    check(text, "r", "distribution", dist)


@pytest.mark.parametrize("alg", ["rng_default", "rng_three_fry", "rng_philox"])
def test_rng_bit_generator_algorithm(alg):
    text = module("s = u64[2] parameter(0)\n"
                  f"  ROOT r = (u64[2], u32[4]) rng-bit-generator(s), algorithm={alg}")
    check(text, "r", "algorithm", alg)


def test_infeed_outfeed_configs():
    text = module("t = token[] after-all()\n"
                  "  i = ((f32[4], s32[]), token[]) infeed(t), infeed_config=\"cfg \\\"in\\\"\"\n"
                  "  v = (f32[4], s32[]) get-tuple-element(i), index=0\n"
                  "  t2 = token[] get-tuple-element(i), index=1\n"
                  "  ROOT o = token[] outfeed(v, t2), outfeed_shape=(f32[4]{0}, s32[]), outfeed_config=\"out\"")
    printed = check(text, "i", "infeed_config", 'cfg "in"')
    check(text, "o", "outfeed_config", "out")
    check(text, "o", "outfeed_shape", lambda s: isinstance(s, Shape) and str(s) == "(f32[4]{0}, s32[])")
    assert 'infeed_config="cfg \\"in\\""' in printed


def test_send_recv():
    text = module("t = token[] after-all()\n  p = f32[4] parameter(0)\n"
                  "  s = (f32[4], u32[], token[]) send(p, t), channel_id=5, is_host_transfer=true\n"
                  "  sd = token[] send-done(s), channel_id=5, is_host_transfer=true\n"
                  "  r = (f32[4], u32[], token[]) recv(t), channel_id=6\n"
                  "  rd = (f32[4], token[]) recv-done(r), channel_id=6\n"
                  "  ROOT x = f32[4] get-tuple-element(rd), index=0")
    check(text, "s", "is_host_transfer", True)
    check(text, "r", "channel_id", 6)


def test_parameter_replication():
    text = module("ROOT p = (f32[4], f32[]) parameter(0), parameter_replication={false,true}")
    printed = check(text, "p", "parameter_replication", (False, True))
    assert "parameter_replication={false,true}" in printed


def test_batch_norm_epsilon_feature_index():
    text = module("x = f32[2,4] parameter(0)\n  s = f32[4] parameter(1)\n  o = f32[4] parameter(2)\n"
                  "  ROOT b = (f32[2,4], f32[4], f32[4]) batch-norm-training(x, s, o), epsilon=0.001, "
                  "feature_index=1")
    check(text, "b", "epsilon", 0.001)
    check(text, "b", "feature_index", 1)


def test_domain_statistics_origin_and_unknown_kept_verbatim():
    text = module("p = f32[4] parameter(0), origin={{\"p\"}}\n"
                  "  d = f32[4] domain(p), domain={kind=\"sharding\", entry={maximal device=0}, exit={replicated}}\n"
                  "  ROOT n = f32[4] negate(d), statistics={visualizing_index=1,stat-0=0.5}, "
                  "some_future_attr=whatever_[1]{2}")
    check(text, "d", "domain", Raw('{kind="sharding", entry={maximal device=0}, exit={replicated}}'))
    check(text, "n", "statistics", Raw("{visualizing_index=1,stat-0=0.5}"))
    check(text, "p", "origin", Raw('{{"p"}}'))
    printed = check(text, "n", "some_future_attr", Raw("whatever_[1]{2}"))
    assert "some_future_attr=whatever_[1]{2}" in printed


# ---- module header -----------------------------------------------------------------------

HEADER = (", is_scheduled=true, entry_computation_layout={(f32[8]{0}, f32[8]{0})->(f32[8]{0}, "
          "f32[8]{0})}, replica_count=2, num_partitions=4, input_output_alias={ {0}: (0, {}, "
          "may-alias), {1}: (1, {}, must-alias) }, buffer_donor={ (0, {}) }, "
          "alias_passthrough_params=true, frontend_attributes={attr=\"v\"}, "
          "allow_spmd_sharding_propagation_to_parameters={true,false}, "
          "allow_spmd_sharding_propagation_to_output={true}")


def test_header_attributes():
    text = module("p0 = f32[8] parameter(0)\n  p1 = f32[8] parameter(1)\n"
                  "  ROOT t = (f32[8], f32[8]) tuple(p0, p1)", header=HEADER)
    m1, printed, m2 = roundtrip(text)
    for m in (m1, m2):
        a = m.attrs
        assert a["is_scheduled"] is True and a["alias_passthrough_params"] is True
        assert a["replica_count"] == 2 and a["num_partitions"] == 4
        lay = a["entry_computation_layout"]
        assert isinstance(lay, ComputationLayout)
        assert [str(s) for s in lay.parameters] == ["f32[8]{0}", "f32[8]{0}"]
        assert str(lay.result) == "(f32[8]{0}, f32[8]{0})"
        assert a["input_output_alias"] == InputOutputAlias(
            (((0,), 0, (), "may-alias"), ((1,), 1, (), "must-alias")))
        assert a["buffer_donor"] == BufferDonor(((0, ()),))
        assert a["frontend_attributes"] == {"attr": "v"}
        assert a["allow_spmd_sharding_propagation_to_parameters"] == (True, False)
        assert a["allow_spmd_sharding_propagation_to_output"] == (True,)
    assert printed.splitlines()[0] == "HloModule m" + HEADER


def test_header_single_bool_spmd_propagation_and_empty_layout():
    text = module("ROOT c = f32[] constant(1)",
                  header=", entry_computation_layout={()->f32[]}, "
                         "allow_spmd_sharding_propagation_to_output=true")
    m1, printed, _ = roundtrip(text)
    assert m1.attrs["allow_spmd_sharding_propagation_to_output"] is True
    assert m1.attrs["entry_computation_layout"] == ComputationLayout((), Shape.array("f32"))
    assert "entry_computation_layout={()->f32[]}" in printed


def test_stack_frame_tables():
    text = """HloModule m

FileNames
1 "a.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}

ENTRY e {
  ROOT p = f32[] parameter(0), metadata={op_name="x" stack_frame_id=1}
}
"""
    m1, printed, _ = roundtrip(text)
    assert list(m1.stack_tables) == ["FileNames", "FunctionNames", "FileLocations", "StackFrames"]
    assert m1.stack_tables["FileNames"] == [(1, '"a.py"')]


# ---- computations, names, comments ---------------------------------------------------------

def test_signatures_and_execution_thread():
    text = """HloModule m

%sub.1 (x.1: f32[], y.1: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y.1 = f32[] parameter(1)
  ROOT %s = f32[] subtract(f32[] %x.1, f32[] %y.1)
}, execution_thread="side"

ENTRY %main.2 (Arg_0.1: f32[4], Arg_1.2: (f32[], s32[])) -> (f32[4], f32[]) {
  %Arg_0.1 = f32[4]{0} parameter(0)
  %Arg_1.2 = (f32[], s32[]) parameter(1)
  %g = f32[] get-tuple-element(%Arg_1.2), index=0
  %m = f32[] map(%g, %g), dimensions={}, to_apply=%sub.1
  ROOT %t = (f32[4]{0}, f32[]) tuple(%Arg_0.1, %m)
}
"""
    m1, printed, m2 = roundtrip(text)
    for m in (m1, m2):
        sub = m.computation("sub.1")
        assert sub.execution_thread == "side" and sub.has_signature
        assert m.entry.name == "main.2" and m.entry.has_signature
        assert m.entry.instruction("m").attrs["to_apply"] is sub
        assert [o.name for o in m.entry.instruction("m").operands] == ["g", "g"]
    assert "ENTRY main.2 (Arg_0.1: f32[4], Arg_1.2: (f32[], s32[])) -> (f32[4], f32[]) {" in printed
    assert "to_apply=sub.1" in printed and "%" not in printed


def test_root_omitted_means_last_instruction():
    text = "HloModule m\n\nENTRY e {\n  p = f32[] parameter(0)\n  n = f32[] negate(p)\n}\n"
    m1, printed, _ = roundtrip(text)
    assert m1.entry.root.name == "n"
    assert "ROOT n = f32[] negate(p)" in printed


def test_no_header_and_no_entry_marker():
    text = "c {\n  ROOT p = f32[] parameter(0)\n}\n\nmain {\n  ROOT q = f32[] parameter(0)\n}\n"
    m1, printed, _ = roundtrip(text)
    assert m1.entry.name == "main"  # the last computation, as in XLA
    assert "ENTRY main {" in printed


def test_comments_everywhere():
    text = """// leading comment
HloModule m /* after the name */

/* block
   comment */
ENTRY e {  // trailing
  p = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[]) parameter(0)
  a = f32[] get-tuple-element(p), index=0 // comment after attributes
  b = f32[] get-tuple-element(p), /* between attributes */ index=5
  ROOT t = (f32[], f32[], f32[], f32[], f32[], /*index=5*/f32[]) tuple(a, b, a, b, a, /*index=5*/b)
}
"""
    m1, printed, _ = roundtrip(text)
    root = m1.entry.root
    assert [o.name for o in root.operands] == ["a", "b", "a", "b", "a", "b"]
    assert len(root.shape.tuple_shapes) == 6
    assert m1.entry.instruction("b").attrs["index"] == 5


def test_layouts_tiles_memory_space():
    text = module("p = f32[8,128]{1,0:T(8,128)(2,1)S(1)} parameter(0)\n"
                  "  q = s4[16]{0:T(1024)(128)(2,1)E(4)} parameter(1)\n"
                  "  r = bf16[4,4]{0,1:T(4,128)(2,1)L(1024)S(2)} parameter(2)\n"
                  "  ROOT c = f32[8,128]{0,1:T(8,128)*(u32)} copy(p)")
    m1, printed, _ = roundtrip(text)
    p = m1.entry.instruction("p").shape
    assert p.layout.minor_to_major == (1, 0) and p.layout.extra == "T(8,128)(2,1)S(1)"
    assert "f32[8,128]{1,0:T(8,128)(2,1)S(1)} parameter(0)" in printed
    assert "s4[16]{0:T(1024)(128)(2,1)E(4)}" in printed


def test_dynamic_dimensions():
    text = module("p = f32[<=4,?,3]{2,1,0} parameter(0)\n  ROOT n = f32[<=4,?,3] negate(p)")
    m1, printed, _ = roundtrip(text)
    s = m1.entry.instruction("p").shape
    assert s.dims == (4, UNBOUNDED, 3) and s.dynamic == (True, True, False)
    assert "f32[<=4,?,3]{2,1,0} parameter(0)" in printed


def test_nested_and_empty_tuples():
    text = module("p = ((f32[2], ()), (), s32[]) parameter(0)\n"
                  "  e = () tuple()\n"
                  "  ROOT g = (f32[2], ()) get-tuple-element(p), index=0")
    m1, printed, _ = roundtrip(text)
    s = m1.entry.instruction("p").shape
    assert s.is_tuple and s.tuple_shapes[1].tuple_shapes == ()
    assert s.tuple_shapes[0].tuple_shapes[1].is_tuple
    assert "((f32[2], ()), (), s32[]) parameter(0)" in printed
    assert "e = () tuple()" in printed


ELEMENT_TYPES = ["pred", "s1", "s2", "s4", "s8", "s16", "s32", "s64", "u1", "u2", "u4", "u8", "u16",
                 "u32", "u64", "f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e4m3fn",
                 "f8e4m3b11fnuz", "f8e3m4", "f8e5m2fnuz", "f8e4m3fnuz", "f4e2m1fn", "f8e8m0fnu",
                 "c64", "c128"]


@pytest.mark.parametrize("etype", ELEMENT_TYPES)
def test_every_element_type_shape(etype):
    text = module(f"p = {etype}[2,3]{{1,0}} parameter(0)\n  ROOT c = {etype}[3,2]{{0,1}} transpose(p), "
                  "dimensions={1,0}")
    m1, printed, _ = roundtrip(text)
    shape = m1.entry.instruction("p").shape
    assert shape.element_type == etype and shape.dims == (2, 3)
    assert np.dtype(shape.dtype) is not None
    assert f"p = {etype}[2,3]{{1,0}} parameter(0)" in printed


def test_token_and_opaque_shapes():
    text = module("t = token[] after-all()\n  o = opaque[] parameter(0)\n  ROOT r = token[] after-all(t)")
    m1, printed, _ = roundtrip(text)
    assert m1.entry.instruction("o").shape.element_type == "opaque"


def test_names_that_need_a_sigil_are_printed_with_one():
    text = module("%f32 = f32[] parameter(0)\n  ROOT %ROOT = f32[] negate(%f32)")
    m1, printed, _ = roundtrip(text)
    assert "%f32 = f32[] parameter(0)" in printed
    assert "ROOT %ROOT = f32[] negate(%f32)" in printed


def test_old_style_operand_shapes():
    text = module("p = f32[4] parameter(0)\n  ROOT n = f32[4]{0} add(f32[4]{0} %p, f32[4]{0} p)")
    m1, _, _ = roundtrip(text)
    assert [o.name for o in m1.entry.root.operands] == ["p", "p"]


def test_attribute_values_are_cached_but_immutable():
    text = module("p = f32[4,4] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
                  "  ROOT q = f32[4,4] copy(p), sharding={devices=[2,2]0,1,2,3}")
    m = parse_module(text)
    a, b = m.entry.instruction("p").attrs["sharding"], m.entry.root.attrs["sharding"]
    assert a == b
    with pytest.raises(Exception):
        a.kind = "replicated"  # frozen


def test_wrong_kind_is_reported_not_kept():
    with pytest.raises(HloSyntaxError):
        parse_module(module("p = f32[4] parameter(0), sharding={replicated devices=[2]0,1}\n"
                            "  ROOT n = f32[4] negate(p)"))


def test_async_syntax_sugar_opcodes():
    # XLA prints an async op that wraps one instruction as <op>-start/-update/-done.
    text = module("p = f32[4] parameter(0)\n"
                  "  s = ((f32[4]), f32[4], u32[]) fusion-start(p), kind=kLoop, calls=neg\n"
                  "  u = ((f32[4]), f32[4], u32[]) fusion-update(s)\n"
                  "  ROOT d = f32[4] fusion-done(u)", NEG)
    m1, printed, _ = roundtrip(text)
    assert [i.opcode for i in m1.entry.instructions[1:]] == ["fusion-start", "fusion-update",
                                                               "fusion-done"]
    check(text, "s", "calls", _is_comps("neg"))
    assert "fusion-start(p), kind=kLoop, calls=neg" in printed
