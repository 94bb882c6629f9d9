"""pairwise_vector.pairwise_sum: numpy's pairwise sum as LLVM vector code gives np.add.reduce's
bits, for every leaf layout (one leaf, leaves of unequal lengths, tails, more leaves than
run at once) and both float types; a row fusion's sum uses it."""
from __future__ import annotations

import re

import numba
import numpy as np
import pytest

from xlaplug.backends.cpu.pairwise_vector import MAX_ELEMENTS, pairwise_program, pairwise_sum
from xlaplug.backends.cpu.row_loop import RowLoopGen
from xlaplug.backends.common.row_contents import row_shape
from xlaplug.hlo import parse_module

R = np.random.default_rng(7)


def _summer(n: int):
    """A jitted f(x) = pairwise_sum(x, n), n a constant in the source (as the row loop has)."""
    ns = {"_xpairwise": pairwise_sum}
    exec(f"def f(x):\n    return _xpairwise(x, {n})\n", ns)
    return numba.njit(ns["f"])


# One leaf (8, 9, 127, 128), two (129, 255), leaves of unequal length with tails (300, 1000,
# 4099), more leaves than run side by side (1024 = 8, 3000 = 24 of unequal length), the most.
SIZES = [8, 9, 15, 127, 128, 129, 255, 300, 1000, 1024, 3000, 4099, MAX_ELEMENTS]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_bits_are_numpys(n, dtype):
    f = _summer(n)
    # magnitudes 2^-20..2^20 with both signs: the order of the adds shows in the low bits
    x = (R.standard_normal(n) * np.exp2(R.integers(-20, 21, n))).astype(dtype)
    assert dtype(f(x)).tobytes() == np.add.reduce(x).tobytes()
    shifted = np.concatenate([x[:3], x])[3:]  # a view 12 or 24 bytes off its allocation
    assert dtype(f(shifted)).tobytes() == np.add.reduce(x).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values_are_numpys(dtype):
    n = 1000
    f = _summer(n)
    for fill in ([np.inf], [np.inf, -np.inf], [np.nan], [-0.0], [np.finfo(dtype).max] * 3):
        x = R.standard_normal(n).astype(dtype)
        x[R.integers(0, n, len(fill))] = fill
        with np.errstate(all="ignore"):
            want = np.add.reduce(x)
        got = dtype(f(x))
        assert (np.isnan(got) and np.isnan(want)) or got.tobytes() == want.tobytes(), fill
    z = np.full(n, -0.0, dtype)
    assert dtype(f(z)).tobytes() == z[0].tobytes()  # -0 + -0 ... stays -0,
    # and numpy adds the sum onto its identity, +0 (as the row loop adds it onto init)
    assert (dtype(0) + dtype(f(z))).tobytes() == np.add.reduce(z).tobytes()


def test_program_splits_as_numpy():
    starts, lens, prog = pairwise_program(1000)
    assert sum(lens) == 1000 and all(8 <= ln <= 128 for ln in lens)
    assert starts == [sum(lens[:i]) for i in range(len(lens))]
    assert prog.count(-1) == len(lens) - 1


def test_row_fusion_sum_is_vector_code():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  x = f32[64,1024] parameter(0)
  e = f32[64,1024] exponential(x)
  z = f32[] constant(0)
  ROOT r = f32[64] reduce(e, z), dimensions={1}, to_apply=add
}
ENTRY main {
  p = f32[64,1024] parameter(0)
  ROOT f = f32[64] fusion(p), kind=kInput, calls=fused
}
"""
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    m, k, levels = row_shape(comp)
    gen = RowLoopGen(comp, m, k, levels)
    src = gen.source(False)
    assert re.search(r"_xpairwise\(t\d+, 1024\)", src), src
    assert any(p.startswith("from xlaplug.backends.cpu.pairwise_vector import") for p in gen.pieces)
