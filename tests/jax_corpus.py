"""A corpus of small jax programs and the HLO text jax produces for them.

Each `Program` is a name, a function and a function building its (deterministic, small)
numpy inputs from a seeded generator.  `load_corpus()` turns every program into an
`Entry`: the lowered HLO text (`jax.jit(f).lower(*args).as_text(dialect="hlo")`), the
compiled HLO text (`...compile().as_text()`), the inputs and jax's outputs (flattened
depth-first).  Generating takes a while, so entries are cached under
`tests/.corpus_cache/<jax version>/<name>/` (lowered.hlo, compiled.hlo, io.npz with keys
in0.. and out0.., meta.json with dtype names and a fingerprint of the program's source).

jax is a test-only dependency: only modules under tests/ import this file.
"""
from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import ml_dtypes
import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

CACHE_ROOT = Path(__file__).resolve().parent / ".corpus_cache"
# Bump to invalidate every cached entry (e.g. when the cache format changes).
CACHE_FORMAT = 1


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable
    make_inputs: Callable[[np.random.Generator], tuple]
    x64: bool = False  # lower and run with jax_enable_x64


@dataclass
class Entry:
    name: str
    lowered_hlo: str
    compiled_hlo: str
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    x64: bool = False


PROGRAMS: dict[str, Program] = {}


def reg(name: str, fn: Callable, make_inputs: Callable, x64: bool = False) -> None:
    assert name not in PROGRAMS, name
    PROGRAMS[name] = Program(name, fn, make_inputs, x64)


def names() -> list[str]:
    return list(PROGRAMS)


# ---- input helpers -------------------------------------------------------------------------

def f32(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


def f64(r, *shape):
    return r.standard_normal(shape).astype(np.float64)


def pos32(r, *shape):
    return r.uniform(0.1, 3.0, shape).astype(np.float32)


def ints(r, dtype, *shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return r.integers(lo, hi, shape, dtype=dtype, endpoint=True)


def spd(r, n, dtype=np.float32):
    a = r.standard_normal((n, n))
    return (a @ a.T + n * np.eye(n)).astype(dtype)


# Values that exercise the edge cases of float ops.
SPECIAL_F32 = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-30, -1e-30,
                        3.4e38, -3.4e38, np.inf, -np.inf, np.nan, 7.25, -7.75, 100.0],
                       np.float32)


def special(r):
    return SPECIAL_F32.copy()


def _to_f16(x):
    with np.errstate(over="ignore"):
        return x.astype(np.float16)


# ---- neural-net style programs -------------------------------------------------------------

def _mlp(x, w1, b1, w2, b2):
    h = jax.nn.relu(x @ w1 + b1)
    h = jnp.tanh(h @ w2 + b2)
    return jax.nn.log_softmax(h, axis=-1)


def _mlp_inputs(r):
    return (f32(r, 4, 8), f32(r, 8, 16), f32(r, 16), f32(r, 16, 5), f32(r, 5))


reg("mlp", _mlp, _mlp_inputs)


def _mlp_grad(x, w1, b1, w2, b2):
    def loss(params):
        return jnp.sum(_mlp(x, *params) ** 2)
    return jax.value_and_grad(loss)((w1, b1, w2, b2))


reg("mlp_value_and_grad", _mlp_grad, _mlp_inputs)


def _attention(q, k, v, mask):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.float32(np.sqrt(q.shape[-1]))
    s = jnp.where(mask, s, -1e9)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("bqk,bkd->bqd", p, v)


reg("attention", _attention,
    lambda r: (f32(r, 2, 4, 8), f32(r, 2, 6, 8), f32(r, 2, 6, 8), r.random((2, 4, 6)) > 0.3))
reg("dot_product_attention",
    lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
    lambda r: (f32(r, 1, 5, 2, 4), f32(r, 1, 5, 2, 4), f32(r, 1, 5, 2, 4)))


def _layernorm(x, g, b):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.var(x, -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b, jax.nn.gelu(x), jax.nn.silu(x)


reg("layernorm_gelu", _layernorm, lambda r: (f32(r, 3, 16), f32(r, 16), f32(r, 16)))


def _softmax_stable(x):
    return jax.nn.softmax(x), jax.nn.logsumexp(x, axis=0), jax.nn.one_hot(jnp.argmax(x, -1), 6)


reg("softmax_logsumexp", _softmax_stable, lambda r: (f32(r, 4, 6) * 10,))

# ---- convolutions ---------------------------------------------------------------------------

conv = lax.conv_general_dilated

reg("conv1d_stride_same",
    lambda x, w: conv(x, w, (2,), "SAME"),
    lambda r: (f32(r, 2, 3, 11), f32(r, 4, 3, 3)))
reg("conv1d_dilated_valid",
    lambda x, w: conv(x, w, (1,), ((2, -1),), lhs_dilation=(2,), rhs_dilation=(3,)),
    lambda r: (f32(r, 1, 2, 9), f32(r, 3, 2, 2)))
reg("conv2d_explicit_padding",
    lambda x, w: conv(x, w, (1, 2), ((1, 2), (0, 1))),
    lambda r: (f32(r, 1, 2, 7, 7), f32(r, 3, 2, 3, 3)))
reg("conv2d_negative_padding",
    lambda x, w: conv(x, w, (1, 1), ((-1, 0), (2, -1))),
    lambda r: (f32(r, 1, 1, 6, 6), f32(r, 2, 1, 2, 2)))
reg("conv2d_lhs_rhs_dilation",
    lambda x, w: conv(x, w, (1, 1), ((1, 1), (0, 0)), lhs_dilation=(2, 1), rhs_dilation=(1, 2)),
    lambda r: (f32(r, 2, 2, 5, 6), f32(r, 2, 2, 2, 2)))
reg("conv2d_feature_group",
    lambda x, w: conv(x, w, (1, 1), "SAME", feature_group_count=2),
    lambda r: (f32(r, 1, 4, 5, 5), f32(r, 6, 2, 3, 3)))
reg("conv2d_depthwise_nhwc",
    lambda x, w: conv(x, w, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                      feature_group_count=3),
    lambda r: (f32(r, 2, 6, 6, 3), f32(r, 3, 3, 1, 3)))
reg("conv2d_batch_group",
    lambda x, w: conv(x, w, (1, 1), "VALID", batch_group_count=2),
    lambda r: (f32(r, 4, 2, 5, 5), f32(r, 4, 2, 2, 2)))
reg("conv2d_bf16_preferred_f32",
    lambda x, w: conv(x, w, (1, 1), "SAME", preferred_element_type=jnp.float32),
    lambda r: (f32(r, 1, 2, 4, 4).astype(ml_dtypes.bfloat16),
               f32(r, 2, 2, 3, 3).astype(ml_dtypes.bfloat16)))
reg("conv_transpose",
    lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")),
    lambda r: (f32(r, 1, 2, 4, 4), f32(r, 3, 2, 3, 3)))
reg("conv3d",
    lambda x, w: conv(x, w, (1, 2, 1), "SAME"),
    lambda r: (f32(r, 1, 2, 4, 5, 3), f32(r, 2, 2, 2, 2, 2)))


def _conv_grads(x, w):
    def loss(x, w):
        return jnp.sum(jnp.sin(conv(x, w, (2, 1), ((1, 0), (1, 1)), rhs_dilation=(1, 2))))
    return jax.grad(loss, argnums=(0, 1))(x, w)


reg("conv2d_grads", _conv_grads, lambda r: (f32(r, 2, 3, 7, 6), f32(r, 4, 3, 2, 2)))

# ---- control flow ---------------------------------------------------------------------------


def _scan_rnn(h0, xs, w, u):
    def step(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, h.sum()
    return lax.scan(step, h0, xs)


reg("scan_rnn", _scan_rnn, lambda r: (f32(r, 4), f32(r, 6, 3), f32(r, 4, 4), f32(r, 3, 4)))
reg("scan_reverse_unroll",
    lambda xs: lax.scan(lambda c, x: (c * 0.5 + x, c), jnp.zeros(3), xs, reverse=True, unroll=2),
    lambda r: (f32(r, 5, 3),))


def _while_collatz(n):
    def cond(s):
        return s[0] != 1

    def body(s):
        v, k = s
        return jnp.where(v % 2 == 0, v // 2, 3 * v + 1), k + 1
    return lax.while_loop(cond, body, (n, jnp.int32(0)))


reg("while_collatz", _while_collatz, lambda r: (np.int32(27),))
reg("fori_loop",
    lambda x: lax.fori_loop(0, 7, lambda i, c: c * 1.1 + jnp.float32(i) * x, x),
    lambda r: (f32(r, 3),))
reg("fori_loop_dynamic_bound",
    lambda n, x: lax.fori_loop(0, n, lambda i, c: c.at[i % 4].add(i), x),
    lambda r: (np.int32(9), np.zeros(4, np.int32)))
reg("cond",
    lambda p, x: lax.cond(p > 0, lambda v: jnp.sin(v), lambda v: jnp.cos(v) * 2, x),
    lambda r: (np.float32(-1.0), f32(r, 4)))
reg("switch_index",
    lambda i, x: lax.switch(i, [lambda v: v + 1, lambda v: v * v, lambda v: -v, jnp.exp], x),
    lambda r: (np.int32(5), f32(r, 3)))  # clamped to the last branch


def _nested_control(x):
    def body(i, c):
        return lax.cond(i % 2 == 0,
                        lambda c: lax.while_loop(lambda s: s[1] < 3, lambda s: (s[0] * 1.5, s[1] + 1),
                                                 (c, 0))[0],
                        lambda c: c - 1.0, c)
    return lax.fori_loop(0, 4, body, x)


reg("nested_control", _nested_control, lambda r: (f32(r, 2, 2),))

# ---- sort, top_k ----------------------------------------------------------------------------

reg("sort_2d", lambda x: (jnp.sort(x, axis=0), jnp.sort(x, axis=1, descending=True)),
    lambda r: (f32(r, 4, 5),))
reg("sort_nan_total_order", lambda x: lax.sort(x), lambda r: (special(r),))
reg("sort_multi_operand",
    lambda k, v, w: lax.sort((k, v, w), num_keys=1),
    lambda r: (ints(r, np.int32, 10, lo=0, hi=3), f32(r, 10), np.arange(10, dtype=np.int32)))
reg("sort_num_keys2_stable",
    lambda a, b, c: lax.sort((a, b, c), num_keys=2, is_stable=True),
    lambda r: (ints(r, np.int32, 12, lo=0, hi=2), ints(r, np.int32, 12, lo=0, hi=2),
               np.arange(12, dtype=np.int32)))
reg("argsort", lambda x: (jnp.argsort(x, stable=True), jnp.argsort(x, descending=True)),
    lambda r: (np.round(f32(r, 9)),))
reg("top_k", lambda x: lax.top_k(x, 3), lambda r: (f32(r, 3, 8),))
reg("sort_unsigned_and_bool",
    lambda a, b: (jnp.sort(a), jnp.sort(b)),
    lambda r: (ints(r, np.uint32, 8), r.random(7) > 0.5))

# ---- gather / scatter -----------------------------------------------------------------------

reg("gather_indexing",
    lambda x, i, j: (x[i], x[:, j], x[i, j[:3]], x[1:, ::2][i % 3]),
    lambda r: (f32(r, 5, 4), np.array([4, 0, -1], np.int32), np.array([3, 1, 0, 2], np.int32)))
reg("take_along_axis_oob",
    lambda x, i: (jnp.take_along_axis(x, i, axis=1),
                  jnp.take(x, i[0], axis=0, mode="clip"),
                  jnp.take(x, i[0], axis=0, mode="fill", fill_value=-7.0)),
    lambda r: (f32(r, 3, 5), np.array([[0, 4, 9], [-1, 2, 2], [1, 1, -6]], np.int32)))


def _at_ops(x, i, u):
    return (x.at[i].set(u), x.at[i].add(u), x.at[i].mul(u), x.at[i].min(u), x.at[i].max(u),
            x.at[i].get(mode="fill", fill_value=0.0))


reg("scatter_at_ops", _at_ops,
    lambda r: (f32(r, 6, 2), np.array([1, 3, 1, 7], np.int32), f32(r, 4, 2)))
reg("scatter_2d_index",
    lambda x, i, u: x.at[i[:, 0], i[:, 1]].add(u, indices_are_sorted=True, unique_indices=False),
    lambda r: (np.zeros((4, 4), np.float32), np.array([[0, 1], [0, 1], [2, 3]], np.int32), f32(r, 3)))
reg("segment_sum_max",
    lambda d, s: (jax.ops.segment_sum(d, s, 4), jax.ops.segment_max(d, s, 4)),
    lambda r: (f32(r, 8, 2), np.array([0, 0, 1, 3, 3, 3, 2, 0], np.int32)))


def _gather_batching(x, idx):
    dn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                    start_index_map=(1,), operand_batching_dims=(0,),
                                    start_indices_batching_dims=(0,))
    return lax.gather(x, idx, dn, slice_sizes=(1, 1, 3), mode=lax.GatherScatterMode.CLIP)


reg("gather_batching_dims", _gather_batching,
    lambda r: (f32(r, 3, 5, 3), np.array([[[0], [4]], [[2], [7]], [[1], [1]]], np.int32)))


def _scatter_batching(x, idx, upd):
    dn = lax.ScatterDimensionNumbers(update_window_dims=(2,), inserted_window_dims=(1,),
                                     scatter_dims_to_operand_dims=(1,), operand_batching_dims=(0,),
                                     scatter_indices_batching_dims=(0,))
    return lax.scatter_add(x, idx, upd, dn, mode=lax.GatherScatterMode.FILL_OR_DROP)


reg("scatter_batching_dims", _scatter_batching,
    lambda r: (f32(r, 3, 5, 2), np.array([[[0], [4]], [[2], [2]], [[9], [1]]], np.int32),
               f32(r, 3, 2, 2)))


def _lax_gather_scatter(x, idx, upd):
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0, 1))
    g = lax.gather(x, idx, dn, slice_sizes=(1, 2), mode="promise_in_bounds")
    sdn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0, 1))
    s = lax.scatter(x, idx, upd, sdn, mode="clip")
    m = lax.scatter_apply(x, idx, lambda v: v * 2.0 + 1.0, sdn, update_shape=(3, 2), mode="clip")
    return g, s, m


reg("lax_gather_scatter", _lax_gather_scatter,
    lambda r: (f32(r, 4, 5), np.array([[0, 0], [3, 3], [1, 2]], np.int32), f32(r, 3, 2)))

# ---- random ---------------------------------------------------------------------------------

reg("random_threefry",
    lambda seed: (jax.random.normal(jax.random.key(seed), (3, 4)),
                  jax.random.uniform(jax.random.fold_in(jax.random.key(seed), 7), (5,)),
                  jax.random.randint(jax.random.split(jax.random.key(seed))[1], (6,), -5, 5),
                  jax.random.bits(jax.random.key(seed), (4,), jnp.uint32)),
    lambda r: (np.uint32(42),))
reg("random_permutation_bernoulli",
    lambda seed: (jax.random.permutation(jax.random.key(seed), 8),
                  jax.random.bernoulli(jax.random.key(seed), 0.3, (10,))),
    lambda r: (np.uint32(3),))
reg("random_rbg",
    lambda seed: (jax.random.normal(jax.random.key(seed, impl="rbg"), (2, 3)),
                  jax.random.bits(jax.random.split(jax.random.key(seed, impl="rbg"))[0], (5,))),
    lambda r: (np.uint32(7),))
reg("random_unsafe_rbg",
    lambda seed: jax.random.uniform(jax.random.key(seed, impl="unsafe_rbg"), (4,)),
    lambda r: (np.uint32(9),))


def _rbg(key, alg):
    k1, a = lax.rng_bit_generator(key, (2, 3), dtype=jnp.uint32, algorithm=alg)
    k2, b = lax.rng_bit_generator(k1, (4,), dtype=jnp.uint8, algorithm=alg)
    return k2, a, b


reg("rng_bit_generator_threefry", partial(_rbg, alg=lax.RandomAlgorithm.RNG_THREE_FRY),
    lambda r: (np.array([1, 2, 3, 4], np.uint32),))
reg("rng_bit_generator_philox", partial(_rbg, alg=lax.RandomAlgorithm.RNG_PHILOX),
    lambda r: (np.array([5, 6, 7, 8], np.uint32),))
reg("rng_bit_generator_u64",
    lambda key: lax.rng_bit_generator(key, (3,), dtype=jnp.uint64,
                                      algorithm=lax.RandomAlgorithm.RNG_PHILOX),
    lambda r: (np.array([11, 12, 13, 14], np.uint32),), x64=True)

# ---- linear algebra -------------------------------------------------------------------------

reg("cholesky", lambda a: jnp.linalg.cholesky(a), lambda r: (spd(r, 4),))
reg("triangular_solve",
    lambda a, b: (lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
                  lax.linalg.triangular_solve(a, b.T, left_side=False, lower=True,
                                              transpose_a=True, unit_diagonal=True)),
    lambda r: (np.tril(f32(r, 4, 4)) + 4 * np.eye(4, dtype=np.float32), f32(r, 4, 3)))
reg("qr", lambda a: jnp.linalg.qr(a), lambda r: (f32(r, 5, 3),))
reg("eigh", lambda a: jnp.linalg.eigh(a), lambda r: (spd(r, 4),))
reg("svd", lambda a: jnp.linalg.svd(a, full_matrices=False), lambda r: (f32(r, 4, 3),))
reg("inv_solve_det",
    lambda a, b: (jnp.linalg.inv(a), jnp.linalg.solve(a, b), jnp.linalg.det(a)),
    lambda r: (spd(r, 3), f32(r, 3, 2)))
reg("lu", lambda a: lax.linalg.lu(a), lambda r: (f32(r, 4, 4),))
reg("linalg_f64_batched",
    lambda a: (jnp.linalg.cholesky(a), jnp.linalg.slogdet(a)),
    lambda r: (np.stack([spd(r, 3, np.float64), spd(r, 3, np.float64)]),), x64=True)
reg("eigh_complex", lambda a: jnp.linalg.eigvalsh(a),
    lambda r: ((lambda m: (m + m.conj().T).astype(np.complex64))(
        r.standard_normal((3, 3)) + 1j * r.standard_normal((3, 3))),))

# ---- fft ------------------------------------------------------------------------------------

reg("fft_ifft", lambda x: (jnp.fft.fft(x), jnp.fft.ifft(x)),
    lambda r: ((r.standard_normal((2, 8)) + 1j * r.standard_normal((2, 8))).astype(np.complex64),))
reg("rfft_irfft", lambda x: (jnp.fft.rfft(x), jnp.fft.irfft(jnp.fft.rfft(x), n=8)),
    lambda r: (f32(r, 3, 8),))
reg("fft2", lambda x: jnp.fft.fft2(x), lambda r: (f32(r, 4, 6),))
reg("fftn_3d", lambda x: (jnp.fft.fftn(x), jnp.fft.irfftn(x, s=(2, 3, 4))),
    lambda r: ((r.standard_normal((2, 3, 4)) + 1j * r.standard_normal((2, 3, 4))).astype(np.complex64),))
reg("fft_c128", lambda x: jnp.fft.ifft2(jnp.fft.rfft2(x)),
    lambda r: (f64(r, 4, 4),), x64=True)

# ---- complex --------------------------------------------------------------------------------


def _complex(a, b):
    return (a * b, a / b, a + b, a - b, jnp.abs(a), jnp.conj(a), jnp.exp(a), jnp.log(a),
            jnp.sqrt(a), jnp.angle(a), a ** 2, jnp.real(a), jnp.imag(b), lax.complex(a.real, b.imag),
            jnp.sign(a), jnp.tanh(a), a == b, jnp.isfinite(a))


def _complex_inputs(r):
    a = (r.standard_normal(6) + 1j * r.standard_normal(6)).astype(np.complex64)
    b = (r.standard_normal(6) + 1j * r.standard_normal(6)).astype(np.complex64)
    b[0] = 0
    return a, b


reg("complex_arith", _complex, _complex_inputs)
reg("complex128_arith", lambda a, b: (a * b, a / b, jnp.abs(a), a @ b, jnp.expm1(a), jnp.log1p(a)),
    lambda r: tuple(x.astype(np.complex128) for x in _complex_inputs(r)), x64=True)

# ---- low/high precision floats --------------------------------------------------------------


def _float_math(x, y):
    return (x + y, x * y, x / y, jnp.exp(x), jnp.tanh(y), jnp.sqrt(jnp.abs(x)), x @ y.T,
            jnp.sum(x, axis=1), jnp.max(y), jnp.log1p(jnp.abs(x)), x.astype(jnp.float32) + 1)


reg("bf16_math", _float_math,
    lambda r: (f32(r, 3, 4).astype(ml_dtypes.bfloat16), f32(r, 3, 4).astype(ml_dtypes.bfloat16)))
reg("f16_math", _float_math,
    lambda r: (f32(r, 3, 4).astype(np.float16), f32(r, 3, 4).astype(np.float16)))
reg("f64_math", lambda x, y: _float_math(x, y) + (jnp.sin(x), jnp.arctan2(x, y), x ** y, jnp.cumsum(x)),
    lambda r: (f64(r, 3, 4), f64(r, 3, 4)), x64=True)
reg("f16_special_values",
    lambda x: (x.astype(jnp.float16), x.astype(jnp.bfloat16), x.astype(jnp.float16) * 2,
               x.astype(jnp.bfloat16) + 1),
    lambda r: (special(r),))
reg("fp8_convert",
    lambda x: (x.astype(jnp.float8_e4m3fn).astype(jnp.float32),
               x.astype(jnp.float8_e5m2).astype(jnp.float32)),
    lambda r: (special(r),))

# ---- integer ops ----------------------------------------------------------------------------


def _int_ops(a, b):
    bits = np.iinfo(a.dtype).bits
    sh = (jnp.arange(a.shape[0]) % (bits + 3)).astype(a.dtype)  # counts up to bits + 2
    return (a + b, a - b, a * b, lax.div(a, b), lax.rem(a, b), a // b, a % b,
            lax.shift_left(a, sh), lax.shift_right_logical(a, sh), lax.shift_right_arithmetic(a, sh),
            lax.population_count(a), lax.clz(a), a & b, a | b, a ^ b, ~a,
            jnp.maximum(a, b), jnp.minimum(a, b), a < b, -a, jnp.abs(a), jnp.sign(a),
            jnp.sum(a), jnp.prod(b[:4]), a ** 3)


def _int_inputs(dtype):
    def make(r):
        info = np.iinfo(dtype)
        n = 16
        a = ints(r, dtype, n)
        b = ints(r, dtype, n, lo=max(info.min, -9), hi=9)
        # Division edge cases: by zero, MIN / -1, negative operands.
        a[0], b[0] = 7, 0
        a[1], b[1] = info.min, (-1 if info.min < 0 else 1)
        if info.min < 0:
            a[2], b[2] = -7, 2
            a[3], b[3] = 7, -2
            a[4], b[4] = -7, -2
        a[5], b[5] = info.max, 3
        return a, b
    return make


for _dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
    _bits = np.iinfo(_dt).bits
    reg(f"int_ops_{'s' if np.iinfo(_dt).min < 0 else 'u'}{_bits}", _int_ops, _int_inputs(_dt),
        x64=_bits == 64)

reg("integer_pow_and_floor_div",
    lambda a, b: (lax.integer_pow(a, 5), jnp.floor_divide(a, b), jnp.remainder(a, b),
                  jnp.right_shift(a, 33), jnp.left_shift(a, -1)),
    lambda r: (ints(r, np.int32, 8, lo=-20, hi=20), np.array([3, -3, 1, -1, 7, 2, -5, 4], np.int32)))

# ---- conversions ----------------------------------------------------------------------------

_SAT_F32 = np.array([0.0, -0.0, 0.4, -0.6, 1.5, -2.5, 127.9, 128.0, -129.0, 255.5, 256.0, -1.0,
                     3e9, -3e9, 2.2e19, -9.3e18, np.inf, -np.inf, np.nan, 65504.0, 70000.0],
                    np.float32)


reg("convert_float_to_int",
    lambda x: tuple(x.astype(t) for t in (jnp.int8, jnp.int16, jnp.int32, jnp.uint8, jnp.uint16,
                                          jnp.uint32, jnp.bool_)),
    lambda r: (_SAT_F32.copy(),))
reg("convert_float_to_64",
    lambda x: (x.astype(jnp.int64), x.astype(jnp.uint64), x.astype(jnp.float64),
               x.astype(jnp.float64).astype(jnp.int64)),
    lambda r: (_SAT_F32.copy(),), x64=True)
reg("convert_int_to_float",
    lambda a, b: (a.astype(jnp.float32), a.astype(jnp.float16), a.astype(jnp.bfloat16),
                  b.astype(jnp.float32), b.astype(jnp.int8), b.astype(jnp.uint8), a.astype(jnp.bool_),
                  (a > 0).astype(jnp.int32), (a > 0).astype(jnp.float32), a.astype(jnp.complex64)),
    lambda r: (np.array([0, 1, -1, 16777217, -16777217, 2**31 - 1, -2**31, 65519, 65520, 300],
                        np.int32),
               np.array([0, 1, 255, 256, 2**31, 2**32 - 1, 1000, 77, 128, 127], np.uint32)))
reg("convert_float_widths",
    lambda x, y: (x.astype(jnp.float64), x.astype(jnp.float32), y.astype(jnp.float16),
                  y.astype(jnp.bfloat16), y.astype(jnp.complex128), x.astype(jnp.int64)),
    lambda r: (np.array([1e-320, 1e300, -1e-40, 0.1, np.nan, -np.inf, 3.5, -2.5], np.float64),
               np.array([1e-8, 1e5, 65520.0, 3.3895e38, np.nan, -0.0, 1.0 / 3, 6e-5], np.float32)),
    x64=True)
reg("bitcast_same_width",
    lambda x, h, i: (lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint32),
                     lax.bitcast_convert_type(h, jnp.uint16), lax.bitcast_convert_type(i, jnp.float32),
                     lax.bitcast_convert_type(h, jnp.bfloat16)),
    lambda r: (special(r), _to_f16(special(r)),
               np.array([0x7f800001, 0x3f800000, -1, 0x00000001], np.int32)))
reg("bitcast_different_width",
    lambda x, b: (lax.bitcast_convert_type(x, jnp.uint8), lax.bitcast_convert_type(x, jnp.int16),
                  lax.bitcast_convert_type(b, jnp.float32), lax.bitcast_convert_type(x, jnp.bfloat16)),
    lambda r: (f32(r, 3), ints(r, np.uint8, 2, 4)))
reg("bitcast_64",
    lambda x: (lax.bitcast_convert_type(x, jnp.uint32), lax.bitcast_convert_type(x, jnp.int64),
               lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint8), jnp.float64)),
    lambda r: (f64(r, 3),), x64=True)
reg("reduce_precision",
    lambda x: (lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
               lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7),
               lax.reduce_precision(x, exponent_bits=4, mantissa_bits=3),
               lax.reduce_precision(x, exponent_bits=2, mantissa_bits=1)),
    lambda r: (np.concatenate([special(r), f32(r, 6) * 1000]),))

# ---- elementwise unary / binary -------------------------------------------------------------

reg("unary_rounding",
    lambda x: (jnp.abs(x), -x, jnp.sign(x), jnp.floor(x), jnp.ceil(x),
               lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
               lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), jnp.trunc(x), jnp.rint(x)),
    lambda r: (special(r),))
reg("unary_exp_log",
    lambda x: (jnp.exp(x), jnp.expm1(x), jnp.log(x), jnp.log1p(x), jax.nn.sigmoid(x),
               lax.logistic(x), jnp.exp2(x), jnp.log2(x), jnp.log10(x)),
    lambda r: (special(r),))
reg("unary_roots",
    lambda x: (jnp.sqrt(x), lax.rsqrt(x), jnp.cbrt(x), lax.square(x), lax.reciprocal(x)),
    lambda r: (special(r),))
reg("unary_trig",
    lambda x, y: (jnp.sin(x), jnp.cos(x), jnp.tan(x), jnp.tanh(x), jnp.arctan2(x, y),
                  jnp.arcsin(jnp.clip(y, -1, 1)), jnp.arccos(jnp.clip(y, -1, 1)), jnp.arctan(x),
                  jnp.sinh(x), jnp.cosh(x), jnp.arcsinh(x), jnp.arccosh(jnp.abs(x) + 1),
                  jnp.arctanh(jnp.clip(y, -0.9, 0.9))),
    lambda r: (special(r), np.roll(special(r), 3)))
reg("unary_special_functions",
    lambda x: (lax.erf(x), lax.erfc(x), lax.erf_inv(jnp.clip(x, -1, 1)), lax.lgamma(jnp.abs(x) + 0.1),
               lax.digamma(jnp.abs(x) + 0.1), jax.scipy.special.i0e(x), lax.is_finite(x),
               jnp.isnan(x), jnp.isinf(x), jnp.nan_to_num(x), jnp.signbit(x)),
    lambda r: (special(r),))
reg("real_imag_complex",
    lambda a, b: (lax.complex(a, b), jnp.real(lax.complex(a, b)), jnp.imag(lax.complex(a, b)),
                  lax.real(lax.complex(a, b) * 2j), lax.imag(lax.exp(lax.complex(a, b)))),
    lambda r: (f32(r, 5), f32(r, 5)))


def _binary(x, y):
    return (x + y, x - y, x * y, x / y, lax.rem(x, y), jnp.remainder(x, y), lax.pow(x, y),
            jnp.power(x, 3), lax.max(x, y), lax.min(x, y), jnp.fmax(x, y), jnp.fmin(x, y),
            jnp.nextafter(x, y), jnp.copysign(x, y), jnp.hypot(x, y), jnp.logaddexp(x, y))


reg("binary_float_nan", _binary, lambda r: (special(r), np.roll(special(r), 5)))
reg("binary_pow_int",
    lambda x, n: (lax.pow(x, n), jnp.power(n, 2), x ** 0.5),
    lambda r: (f32(r, 6), np.array([-2, -1, 0, 1, 2, 7], np.int32)))


def _compare(x, y):
    return (x == y, x != y, x < y, x <= y, x > y, x >= y)


reg("compare_float_nan", _compare, lambda r: (special(r), np.roll(special(r), 2)))
reg("compare_int", lambda a, b, c, d: _compare(a, b) + _compare(c, d),
    lambda r: (ints(r, np.int32, 8, lo=-3, hi=3), ints(r, np.int32, 8, lo=-3, hi=3),
               np.array([0, 1, 2**32 - 1, 2**31, 5, 5], np.uint32),
               np.array([1, 0, 0, 2**31 - 1, 5, 6], np.uint32)))
reg("compare_bool_and_logic",
    lambda a, b: (a == b, a < b, a & b, a | b, a ^ b, ~a, jnp.logical_not(b)),
    lambda r: (r.random(6) > 0.5, r.random(6) > 0.5))
reg("select_clamp",
    lambda p, x, y, lo, hi: (lax.select(p, x, y), jnp.where(x > 0, x, 0.0), lax.clamp(lo, x, hi),
                             jnp.clip(x, -0.5, 0.5), lax.clamp(np.int32(-2), (x * 10).astype(jnp.int32),
                                                               np.int32(3)),
                             lax.select_n(jnp.int32(1), x, y, x * y)),
    lambda r: (r.random(6) > 0.5, f32(r, 6), f32(r, 6), np.float32(-0.2), f32(r, 6) + 1))

# ---- shape manipulation ---------------------------------------------------------------------

reg("broadcast_reshape_transpose",
    lambda x: (jnp.broadcast_to(x[:, None, :], (3, 2, 4)), x.reshape(4, 3), x.reshape(12),
               x.T, jnp.transpose(x.reshape(3, 2, 2), (2, 0, 1)), lax.broadcast(x, (2,)),
               lax.broadcast_in_dim(x[0], (2, 4, 3), (1,)), x[None, :, None], lax.squeeze(x[:1], (0,)),
               lax.expand_dims(x, (1,))),
    lambda r: (f32(r, 3, 4),))
reg("rev_slice",
    lambda x: (lax.rev(x, (0,)), lax.rev(x, (0, 1)), x[::-1, 1:5:2], lax.slice(x, (1, 0), (4, 6), (2, 3)),
               x[-2:, :-1], jnp.flip(x, 1)),
    lambda r: (f32(r, 5, 6),))
reg("dynamic_slice_oob",
    lambda x, i, j: (lax.dynamic_slice(x, (i, j), (2, 3)), lax.dynamic_slice_in_dim(x, -i, 3, axis=1),
                     lax.dynamic_index_in_dim(x, j, axis=0, keepdims=False)),
    lambda r: (f32(r, 4, 5), np.int32(3), np.int32(-9)))
reg("dynamic_update_slice_oob",
    lambda x, u, i, j: (lax.dynamic_update_slice(x, u, (i, j)), lax.dynamic_update_slice(x, u, (-i, 1)),
                        lax.dynamic_update_slice_in_dim(x, u[:1], j, axis=0)),
    lambda r: (f32(r, 4, 5), f32(r, 2, 2), np.int32(10), np.int32(2)))
reg("dynamic_slice_s64_indices",
    lambda x, i, j: lax.dynamic_slice(x, (i, j), (2, 2)),
    lambda r: (f32(r, 4, 4), np.int64(2**40), np.int64(-1)), x64=True)
reg("pad_negative_interior",
    lambda x: (lax.pad(x, np.float32(-1), ((1, 2, 1), (-1, 3, 0))),
               lax.pad(x, np.float32(0), ((-2, -1, 2), (0, 0, 1))),
               jnp.pad(x, ((1, 1), (2, 0)), mode="reflect"), jnp.pad(x, 1, mode="edge")),
    lambda r: (f32(r, 4, 3),))
reg("concatenate_iota",
    lambda x, y: (jnp.concatenate([x, y, x], axis=0), jnp.concatenate([x, x * 2], axis=1),
                  lax.iota(jnp.int32, 5), lax.broadcasted_iota(jnp.float32, (2, 3), 1),
                  jnp.arange(6, dtype=jnp.uint8), jnp.eye(3, 4, k=1), jnp.tri(3), jnp.triu(x)),
    lambda r: (f32(r, 2, 3), f32(r, 1, 3)))

# ---- reductions -----------------------------------------------------------------------------

reg("reduce_basic",
    lambda x, b: (jnp.sum(x), jnp.sum(x, axis=0), jnp.max(x, axis=1), jnp.min(x), jnp.prod(x, axis=1),
                  jnp.all(b, axis=0), jnp.any(b), jnp.mean(x, axis=(0, 1)), jnp.sum(b),
                  jnp.max(jnp.where(x > 0, x, jnp.nan))),
    lambda r: (f32(r, 3, 4), r.random((3, 4)) > 0.4))
reg("reduce_int",
    lambda a: (jnp.sum(a, axis=0), jnp.max(a), jnp.min(a, axis=1), jnp.bitwise_and.reduce(a, axis=0),
               jnp.bitwise_or.reduce(a, axis=1), jnp.bitwise_xor.reduce(a, axis=0), jnp.prod(a, axis=0)),
    lambda r: (ints(r, np.int32, 3, 4, lo=-100, hi=100),))


def _variadic_argmax(x):
    idx = lax.broadcasted_iota(jnp.int32, x.shape, 1)

    def comb(a, b):
        av, ai = a
        bv, bi = b
        take_a = (av > bv) | ((av == bv) & (ai < bi))
        return lax.select(take_a, av, bv), lax.select(take_a, ai, bi)
    return lax.reduce((x, idx), (np.float32(-np.inf), np.int32(0)), comb, (1,))


reg("reduce_variadic_argmax", _variadic_argmax, lambda r: (f32(r, 3, 6),))
reg("argmax_argmin",
    lambda x: (jnp.argmax(x, axis=0), jnp.argmin(x, axis=1), jnp.nanargmax(x)),
    lambda r: (np.where(r.random((4, 5)) > 0.8, np.nan, f32(r, 4, 5)).astype(np.float32),))
reg("reduce_window_pools",
    lambda x: (lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"),
               lax.reduce_window(x, 0.0, lax.add, (1, 1, 3, 3), (1, 1, 2, 1), ((0, 0), (0, 0), (1, 1), (1, 1))) / 9,
               lax.reduce_window(x, jnp.inf, lax.min, (1, 1, 2, 2), (1, 1, 1, 1), "SAME",
                                 base_dilation=(1, 1, 2, 1), window_dilation=(1, 1, 1, 2))),
    lambda r: (f32(r, 1, 2, 6, 5),))
reg("reduce_window_variadic",
    lambda x, y: lax.reduce_window((x, y), (np.float32(0), np.int32(0)),
                                   lambda a, b: (a[0] + b[0], a[1] * b[1] + 1), (2,), (1,), "VALID"),
    lambda r: (f32(r, 6), ints(r, np.int32, 6, lo=-3, hi=3)))


def _maxpool_grad(x):
    def pool(x):
        return jnp.sum(jnp.sin(lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                                 "SAME")))
    return jax.grad(pool)(x)


reg("select_and_scatter_maxpool_grad", _maxpool_grad, lambda r: (f32(r, 2, 5, 5, 2),))
reg("avgpool_grad",
    lambda x: jax.grad(lambda x: jnp.sum(lax.reduce_window(x, 0.0, lax.add, (2, 2), (2, 1), "SAME") ** 2))(x),
    lambda r: (f32(r, 5, 4),))
reg("cumulative",
    lambda x, a: (jnp.cumsum(x, axis=0), jnp.cumprod(x, axis=1), lax.cummax(x, axis=1),
                  lax.cummin(x, axis=0, reverse=True), lax.cumlogsumexp(x, axis=1), jnp.cumsum(a)),
    lambda r: (f32(r, 4, 5), ints(r, np.int32, 7, lo=-5, hi=5)))

# ---- vmap, dot_general, einsum --------------------------------------------------------------


def _per_example(x, w, i):
    return jnp.tanh(lax.dynamic_slice(x, (i,), (3,)) @ w).sum()


reg("vmap_per_example",
    jax.vmap(_per_example, in_axes=(0, None, 0)),
    lambda r: (f32(r, 4, 6), f32(r, 3, 2), np.array([0, 1, 3, 5], np.int32)))
reg("vmap_nested_grad",
    jax.vmap(jax.vmap(jax.grad(lambda a, b: jnp.sin(a * b) * a), in_axes=(0, None)), in_axes=(None, 0)),
    lambda r: (f32(r, 3), f32(r, 4)))
reg("dot_general_batch",
    lambda a, b: (lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
                  lax.dot_general(a, b, (((1, 2), (2, 1)), ((0,), (0,))))),
    lambda r: (f32(r, 2, 3, 4), f32(r, 2, 4, 3)))
reg("dot_mixed_precision",
    lambda a, b, c, d: (lax.dot(a, b, preferred_element_type=jnp.float32),
                        lax.dot(c, d, preferred_element_type=jnp.int32),
                        jnp.matmul(a, b), lax.dot(a.astype(jnp.float16), b.astype(jnp.float16),
                                                  preferred_element_type=jnp.float32),
                        lax.dot(a.astype(jnp.float32), b.astype(jnp.float32),
                                precision=lax.Precision.HIGHEST)),
    lambda r: (f32(r, 3, 4).astype(ml_dtypes.bfloat16), f32(r, 4, 2).astype(ml_dtypes.bfloat16),
               ints(r, np.int8, 3, 4), ints(r, np.int8, 4, 5)))
reg("dot_vector_matrix_int",
    lambda v, m, w: (v @ m, m @ w, jnp.dot(v, v), jnp.outer(v, w), jnp.vdot(v, v)),
    lambda r: (ints(r, np.int32, 4, lo=-5, hi=5), ints(r, np.int32, 4, 3, lo=-5, hi=5),
               ints(r, np.int32, 3, lo=-5, hi=5)))
reg("einsum",
    lambda a, b, c: (jnp.einsum("ij,jk->ik", a, b), jnp.einsum("bij,bjk->bik", c, c.transpose(0, 2, 1)),
                     jnp.einsum("ii->i", a[:, :3]), jnp.einsum("ij->", a), jnp.einsum("ij,kj->ikj", a, a),
                     jnp.einsum("bij,jk->bk", c, b[:3])),
    lambda r: (f32(r, 3, 4), f32(r, 4, 2), f32(r, 2, 3, 3)))
reg("optimization_barrier",
    lambda x, y: lax.optimization_barrier((x * 2, y + 1, (x @ y, jnp.int32(3)))),
    lambda r: (f32(r, 2, 2), f32(r, 2, 2)))
reg("remat_checkpoint",
    lambda x: jax.grad(lambda x: jnp.sum(jax.checkpoint(lambda v: jnp.sin(jnp.sin(v)) * v)(x)))(x),
    lambda r: (f32(r, 5),))

# ---- misc programs that hit other opcodes or structures -------------------------------------

reg("pytree_outputs",
    lambda d: {"b": [d["x"] * 2, (d["y"],)], "a": d["x"].sum()},
    lambda r: ({"x": f32(r, 3), "y": ints(r, np.int32, 2, lo=0, hi=9)},))
reg("scalar_and_empty",
    lambda x, e: (x * 2, e + 1, jnp.sum(e), e.reshape(3, 0), jnp.concatenate([e, e])),
    lambda r: (np.float32(3.5), np.zeros((0,), np.float32)))
reg("no_inputs_constants",
    lambda: (jnp.array([[1.5, -2.0], [np.nan, np.inf]], jnp.float32), jnp.arange(10) * 3,
             jnp.array([True, False]), jnp.array([1 + 2j, -3.5j], jnp.complex64),
             jnp.full((2, 3), -0.0, jnp.bfloat16), jnp.array([65504, -1e-7], jnp.float16),
             jnp.array([-128, 127], jnp.int8), jnp.array([2**32 - 1], jnp.uint32)),
    lambda r: ())
reg("constants_64",
    lambda x: (x + jnp.array([1e300, -1e-300, np.pi], jnp.float64), jnp.array([2**63 - 1, -2**63], jnp.int64),
               jnp.array([2**64 - 1], jnp.uint64), jnp.array([1e-310 + 1e300j], jnp.complex128)),
    lambda r: (f64(r, 3),), x64=True)
reg("large_constant_tensor",
    lambda x: x + jnp.asarray(np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)),
    lambda r: (f32(r, 8, 8),))
reg("searchsorted_interp",
    lambda xs, q: (jnp.searchsorted(xs, q), jnp.searchsorted(xs, q, side="right", method="sort"),
                   jnp.interp(q, xs, xs ** 2), jnp.digitize(q, xs)),
    lambda r: (np.sort(f32(r, 8)), f32(r, 5)))
reg("convolve_correlate",
    lambda a, b: (jnp.convolve(a, b), jnp.correlate(a, b, mode="same")),
    lambda r: (f32(r, 10), f32(r, 3)))
reg("histogram_bincount",
    lambda x, i: (jnp.histogram(x, bins=4, range=(-2, 2))[0], jnp.bincount(i, length=5)),
    lambda r: (f32(r, 20), ints(r, np.int32, 12, lo=0, hi=4)))
reg("unique_static_size",
    lambda x: jnp.unique(x, size=6, fill_value=-1),
    lambda r: (ints(r, np.int32, 10, lo=0, hi=5),))
reg("custom_jvp_grad",
    lambda x: jax.grad(lambda v: jnp.sum(jax.nn.softplus(v) + jax.nn.relu(v) + jnp.logaddexp(v, 0.5)))(x),
    lambda r: (f32(r, 6),))
reg("jacfwd_hessian",
    lambda x: (jax.jacfwd(jnp.sin)(x), jax.hessian(lambda v: jnp.sum(v ** 3))(x)),
    lambda r: (f32(r, 3),))
reg("approx_max_k",
    lambda x: (lax.approx_max_k(x, 2), lax.approx_min_k(x, 3)),
    lambda r: (f32(r, 2, 16),))
reg("map_and_associative_scan",
    lambda x: (lax.map(lambda v: jnp.sum(v ** 2), x), lax.associative_scan(jnp.add, x, axis=1),
               lax.associative_scan(lambda a, b: a * b, x[0], reverse=True)),
    lambda r: (f32(r, 4, 5),))
reg("polynomial_and_where_chain",
    lambda x: jnp.polyval(jnp.array([1.0, -2.0, 0.5, 3.0]), x) + jnp.piecewise(
        x, [x < -0.5, x > 0.5], [lambda v: v * 2, lambda v: v ** 2, 0.0]),
    lambda r: (f32(r, 7),))
reg("matrix_ops",
    lambda a: (jnp.linalg.norm(a), jnp.linalg.norm(a, axis=1), jnp.trace(a), jnp.diag(a), jnp.kron(a[:2, :2], a[:2, :2]),
               jnp.linalg.matrix_power(a, 3), jnp.tril(a, -1)),
    lambda r: (f32(r, 4, 4),))
reg("stop_gradient_and_while_grad",
    lambda x: jax.grad(lambda v: jnp.sum(lax.stop_gradient(v) * v + lax.fori_loop(0, 3, lambda i, c: c * v, v)))(x),
    lambda r: (f32(r, 3),))
reg("scan_grad",
    lambda x, w: jax.grad(lambda w: lax.scan(lambda c, xi: (jnp.tanh(c * w + xi), None), 0.0 * x[0], x)[0].sum())(w),
    lambda r: (f32(r, 5, 2), f32(r, 2)))
reg("cond_with_operands_and_consts",
    lambda p, x, y: lax.cond(p, lambda a, b: (a + b, a * 2), lambda a, b: (a - b, b * 3), x, y),
    lambda r: (np.bool_(True), f32(r, 3), f32(r, 3)))
reg("switch_many_branches_int",
    lambda i, x: lax.switch(i, [lambda v, k=k: v * k + jnp.int32(k) for k in range(5)], x),
    lambda r: (np.int32(-3), ints(r, np.int32, 4, lo=-9, hi=9)))
reg("expand_like_ops",
    lambda x: (jnp.repeat(x, 2, axis=0), jnp.tile(x, (2, 1)), jnp.roll(x, 2, axis=1), jnp.rot90(x),
               jnp.moveaxis(x[None], 0, 2), jnp.stack([x, x], axis=1), jnp.split(x, 2, axis=1)[1]),
    lambda r: (f32(r, 2, 4),))
reg("bool_int_arith_mixed",
    lambda a, b: (a.astype(jnp.int32) + b, jnp.where(a, b, -b), jnp.count_nonzero(b), jnp.sum(a)),
    lambda r: (r.random(6) > 0.5, ints(r, np.int16, 6, lo=-9, hi=9)))
reg("nan_reductions",
    lambda x: (jnp.nansum(x), jnp.nanmax(x, axis=0), jnp.nanmean(x), jnp.median(x), jnp.std(x, axis=1)),
    lambda r: (np.where(r.random((3, 4)) > 0.7, np.nan, f32(r, 3, 4)).astype(np.float32),))



def _collectives(x):
    from jax.sharding import AxisType, PartitionSpec as P
    mesh = jax.make_mesh((1,), ("i",), axis_types=(AxisType.Auto,))

    def body(v):
        return (lax.psum(v, "i"), lax.all_gather(v, "i"), lax.ppermute(v, "i", [(0, 0)]),
                lax.psum_scatter(v, "i", tiled=True), lax.all_to_all(v, "i", 0, 0, tiled=True),
                lax.axis_index("i"), lax.pmax(v, "i"), lax.pmin(v.astype(jnp.int32), "i"))
    return jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=(P("i"),) * 5 + (P(),) + (P("i"),) * 2,
                         check_vma=False)(x)


reg("collectives_shard_map_1_device", _collectives, lambda r: (f32(r, 4),))


def _sharding_constraint(x, y):
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((1,), ("i",), axis_types=(AxisType.Auto,))
    return lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P("i"))), y + 1


reg("sharding_constraint", _sharding_constraint, lambda r: (f32(r, 4), f32(r, 4)))
reg("donated_input_output_alias", jax.jit(lambda x, y: (x * 2, y - x), donate_argnums=(0,)),
    lambda r: (f32(r, 3, 2), f32(r, 3, 2)))
reg("composite_call",
    lambda x: lax.composite(lambda v, scale: jnp.sin(v) * scale, name="corpus.scaled_sin", version=2)(
        x, scale=np.float32(1.5)),
    lambda r: (f32(r, 4),))
reg("rng_uniform_in_range",  # `rng` is stateful; only its range is a deterministic output
    lambda: jnp.all((lambda u: (u >= -1) & (u < 2))(lax.rng_uniform(np.float32(-1), np.float32(2), (8,)))),
    lambda r: ())
reg("ragged_dot",
    lambda a, b, g: lax.ragged_dot(a, b, g),
    lambda r: (f32(r, 6, 3), f32(r, 2, 3, 4), np.array([2, 4], np.int32)))


@jax.custom_vjp
def _clip_grad(x):
    return x


_clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))
reg("custom_vjp", lambda x: jax.grad(lambda v: jnp.sum(_clip_grad(v) ** 3))(x), lambda r: (f32(r, 5),))


# ---- generation and cache -------------------------------------------------------------------

def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _fingerprint(p: Program) -> str:
    def src(obj):
        obj = getattr(obj, "func", obj)  # functools.partial
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            return repr(obj)
    h = hashlib.sha256()
    h.update(f"{CACHE_FORMAT}|{p.name}|{p.x64}|".encode())
    h.update(src(p.fn).encode())
    h.update(src(p.make_inputs).encode())
    return h.hexdigest()[:16]


def _dtype_name(a: np.ndarray) -> str:
    return a.dtype.name


def _from_dtype_name(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, name))


def _to_storable(a: np.ndarray) -> np.ndarray:
    # npz cannot describe ml_dtypes types; store their bits and the name in meta.json.
    if a.dtype.type.__module__.startswith("ml_dtypes") or a.dtype.kind == "V":
        return a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return a


def generate(p: Program) -> Entry:
    inputs = p.make_inputs(np.random.default_rng(_seed(p.name)))
    with jax.enable_x64(p.x64):
        lowered = jax.jit(p.fn).lower(*inputs)
        lowered_hlo = lowered.as_text(dialect="hlo")
        compiled = lowered.compile()
        compiled_hlo = compiled.as_text()
        outs = compiled(*inputs)
    flat_in = [np.asarray(x) for x in jax.tree_util.tree_leaves(inputs)]
    flat_out = [np.asarray(x) for x in jax.tree_util.tree_leaves(outs)]
    return Entry(p.name, lowered_hlo, compiled_hlo, flat_in, flat_out, p.x64)


def _cache_dir(name: str) -> Path:
    return CACHE_ROOT / jax.__version__ / name


def _write(entry: Entry, fingerprint: str, d: Path) -> None:
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=d.parent))
    try:
        (tmp / "lowered.hlo").write_text(entry.lowered_hlo)
        (tmp / "compiled.hlo").write_text(entry.compiled_hlo)
        arrays = {f"in{i}": _to_storable(a) for i, a in enumerate(entry.inputs)}
        arrays.update({f"out{i}": _to_storable(a) for i, a in enumerate(entry.outputs)})
        np.savez(tmp / "io.npz", **arrays)
        meta = {"fingerprint": fingerprint, "x64": entry.x64,
                "inputs": [_dtype_name(a) for a in entry.inputs],
                "outputs": [_dtype_name(a) for a in entry.outputs]}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if d.exists():
            shutil.rmtree(d, ignore_errors=True)
        try:
            os.replace(tmp, d)  # atomic; another process may have won the race
        except OSError:
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _read(name: str, fingerprint: str, d: Path) -> Entry | None:
    try:
        meta = json.loads((d / "meta.json").read_text())
        if meta["fingerprint"] != fingerprint:
            return None
        lowered = (d / "lowered.hlo").read_text()
        compiled = (d / "compiled.hlo").read_text()
        with np.load(d / "io.npz") as z:
            ins = [z[f"in{i}"].view(_from_dtype_name(t)) for i, t in enumerate(meta["inputs"])]
            outs = [z[f"out{i}"].view(_from_dtype_name(t)) for i, t in enumerate(meta["outputs"])]
    except (OSError, KeyError, ValueError):
        return None
    return Entry(name, lowered, compiled, ins, outs, meta["x64"])


def _lock_path(name: str) -> Path:
    return CACHE_ROOT / jax.__version__ / f".{name}.lock"


def _lock(name: str, wait: bool):
    """An open lock file held exclusively, or None when another process holds it (wait=False).
    xdist's workers share the cache: the lock keeps two of them from generating one entry."""
    path = _lock_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a")  # noqa: SIM115 - closed by _unlock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        f.close()
        return None
    return f


def _unlock(f) -> None:
    fcntl.flock(f, fcntl.LOCK_UN)
    f.close()


def _cached(name: str) -> Entry | None:
    return _read(name, _fingerprint(PROGRAMS[name]), _cache_dir(name))


def _generate_locked(name: str, lock) -> Entry:
    """Generate and store one entry while holding its lock (re-read first: another process
    may have written it while this one waited)."""
    try:
        entry = _cached(name)
        if entry is None:
            p = PROGRAMS[name]
            entry = generate(p)
            _write(entry, _fingerprint(p), _cache_dir(name))
        return entry
    finally:
        _unlock(lock)


def load_entry(name: str) -> Entry:
    entry = _cached(name)
    return entry if entry is not None else _generate_locked(name, _lock(name, wait=True))


def load_corpus() -> list[Entry]:
    """Every program's entry, generating (and caching) the ones not cached yet.  Processes
    that load the corpus at once (xdist workers on a fresh checkout) share the work: each
    generates the entries no other process is generating, then reads the others' entries."""
    entries, busy = {}, []
    for name in PROGRAMS:
        entry = _cached(name)
        if entry is None:
            lock = _lock(name, wait=False)
            if lock is None:  # another process is generating it: read it at the end
                busy.append(name)
                continue
            entry = _generate_locked(name, lock)
        entries[name] = entry
    for name in busy:
        entries[name] = load_entry(name)
    return [entries[n] for n in PROGRAMS]


def input_elements(name: str) -> int:
    """How many elements the program's inputs hold, without generating its entry (no jax):
    what test collection may ask of every program."""
    p = PROGRAMS[name]
    inputs = p.make_inputs(np.random.default_rng(_seed(p.name)))
    return sum(np.asarray(a).size for a in jax.tree_util.tree_leaves(inputs))


if __name__ == "__main__":
    import sys
    import time
    t0 = time.perf_counter()
    for n in (sys.argv[1:] or PROGRAMS):
        t = time.perf_counter()
        try:
            e = load_entry(n)
        except Exception as ex:  # report every failing program, not just the first
            print(f"FAIL {n}: {type(ex).__name__}: {str(ex)[:300]}")
            continue
        print(f"{time.perf_counter() - t:6.2f}s {n} ({len(e.lowered_hlo)}/{len(e.compiled_hlo)} chars)")
    print(f"{len(PROGRAMS)} programs, {time.perf_counter() - t0:.1f}s")
