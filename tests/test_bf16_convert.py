"""bf16_convert: the numba f32 <-> bf16 conversions give ml_dtypes' bits (the astype they
replace in the kernels), on every class of value, at every size and layout the callers pass.
(All 2^32 f32 patterns were compared once, when the module was written: no mismatch.)"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xlaplug.backends.cpu.bf16_convert import PARALLEL_FROM, to_bf16, to_f32

BF16 = np.dtype(ml_dtypes.bfloat16)
SPECIAL = np.array([
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x007FFFFF,
    0x00800000, 0x3F800000, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7F7FFF, 0x7F7F8000,
    0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0xFFC12345,
    0xFF800001, 0x7FBFFFFF], np.uint32)


def _patterns(n: int) -> np.ndarray:
    r = np.random.default_rng(7).integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    r[:SPECIAL.size] = SPECIAL
    return r.view(np.float32)


def _reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(BF16)


@pytest.mark.parametrize("n", [SPECIAL.size, 4096, PARALLEL_FROM + 13])
@pytest.mark.parametrize("parallel", [False, True])
def test_to_bf16_gives_ml_dtypes_bits(n, parallel):
    x = _patterns(n)
    got = to_bf16(x, parallel)
    assert got.dtype == BF16 and got.shape == x.shape
    assert got.view(np.uint16).tobytes() == _reference(x).view(np.uint16).tobytes()


def test_to_bf16_keeps_shape_and_reads_any_layout():
    x = _patterns(64 * 96).reshape(64, 96)
    for view in (x, x.T, x[::2, 3:]):
        got = to_bf16(view)
        assert got.shape == view.shape
        assert got.view(np.uint16).tobytes() == _reference(view).view(np.uint16).tobytes()


def test_to_bf16_of_another_dtype_is_astype():
    x = np.random.default_rng(1).standard_normal(300)
    assert to_bf16(x).view(np.uint16).tobytes() == _reference(x).view(np.uint16).tobytes()


@pytest.mark.parametrize("parallel", [False, True])
def test_to_f32_is_the_exact_widening(parallel):
    b = np.arange(1 << 16, dtype=np.uint16).view(BF16)
    b = np.concatenate([b] * (PARALLEL_FROM // b.size + 1))
    got = to_f32(b, parallel)
    assert got.dtype == np.float32
    assert got.tobytes() == b.astype(np.float32).tobytes()
    t = b[: 128 * 64].reshape(128, 64).T
    assert to_f32(t).tobytes() == t.astype(np.float32).tobytes()
