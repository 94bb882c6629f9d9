"""@njit plugin kernels served inside XLA by the numba-compiled FFI handler (no Python in
the call), with jax as the oracle; what the handler cannot serve itself (another dtype, a
raising kernel) goes through the Python handler, whose calls are counted here."""
import functools
import threading

import numpy as np
import pytest
from numba import njit, types

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlaplug.plugin import Plugin  # noqa: E402
from xlaplug.xla.ffi import COMPILED, register_op  # noqa: E402
from xlaplug.xla.ffi.register import _TARGETS  # noqa: E402

# Compiling a handler of 9 signatures takes numba several seconds: the module is slow.
pytestmark = [pytest.mark.jax, pytest.mark.slow]

SIGS = [types.void(*[types.Array(dt, rank, "C")] * 3, types.float64, types.int64, types.boolean)
        for dt, rank in [(types.float32, r) for r in range(5)] +
        [(getattr(types, t), 2) for t in ("float64", "int32", "int64", "uint8")]]


def axpy(x, y, out, alpha, shift=0, negate=False):
    if alpha < 0:
        raise ValueError("alpha must not be negative")
    xf, yf, of = x.reshape(x.size), y.reshape(y.size), out.reshape(out.size)
    for i in range(xf.size):
        v = xf[i] * alpha + yf[i] + shift
        of[i] = -v if negate else v


WEIGHTED_SIGS = ["void(float32[:, ::1], float32[:, ::1], float32[::1], float32[::1])",
                 "void(float32[:, ::1], float32[:, ::1], float32[::1], int32[::1])"]


def weighted(x, out, sums, weights):
    # two results; an array attribute (weights) of either dtype
    for r in range(x.shape[0]):
        acc = np.float32(0)
        for j in range(x.shape[1]):
            out[r, j] = x[r, j] * weights[j]
            acc += out[r, j]
        sums[r] = acc


XOR_SIGS = ["void(boolean[::1], boolean[::1], boolean[::1])",
            "void(boolean[:, :, ::1], boolean[:, :, ::1], boolean[:, :, ::1])"]


def xor(a, b, out):
    af, bf, of = a.reshape(a.size), b.reshape(b.size), out.reshape(out.size)
    for i in range(af.size):
        of[i] = af[i] != bf[i]


@functools.cache
def _plugin() -> Plugin:
    """The plugin, its kernels @njit with their explicit signatures.  numba compiles such a
    kernel for every signature at once: made here, on a test's first use, rather than at
    import -- every xdist worker imports this module to collect it (so did the fast loop,
    which deselects it), and each compiled the 13 signatures (~13 s of a loaded worker)."""
    plugin = Plugin("ffi_test_compiled")
    plugin.kernel("ffi_ct.axpy")(njit(SIGS)(axpy))
    plugin.kernel("ffi_ct.weighted")(njit(WEIGHTED_SIGS)(weighted))
    plugin.kernel("ffi_ct.xor")(njit(XOR_SIGS)(xor))
    return plugin


def serve(op):
    s = register_op(op, _plugin().kernels[(op, "cpu")])
    assert s.how == COMPILED, s
    python = _TARGETS[op].handler.python
    counts = []
    python.run = lambda frame, run=type(python).run: (counts.append(1), run(python, frame))[1]
    return counts


def axpy_call(x, y, **attrs):
    return jax.ffi.ffi_call("ffi_ct.axpy", jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y, **attrs)


@pytest.mark.parametrize("dtype,rank", [("float32", r) for r in range(5)] +
                         [(t, 2) for t in ("float64", "int32", "int64", "uint8")])
def test_ranks_and_dtypes_served_without_python(dtype, rank):
    counts = serve("ffi_ct.axpy")
    shape = (3, 2, 4, 2)[:rank]
    with jax.enable_x64(True):
        x = jnp.asarray(np.arange(np.prod(shape, dtype=int)).reshape(shape) % 7).astype(dtype)
        y = jnp.ones(shape, dtype)
        got = jax.jit(lambda x, y: axpy_call(x, y, alpha=2.0, shift=3, negate=True))(x, y)
        want = jax.jit(lambda x, y: -(x * 2 + y + 3))(x, y)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert counts == [], "the compiled handler called into Python"


def test_missing_attribute_takes_the_kernels_default_and_python_never_runs():
    counts = serve("ffi_ct.axpy")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = jax.jit(lambda x: axpy_call(x, x, alpha=np.float32(0.5)))(x)
    np.testing.assert_array_equal(got, x * 0.5 + x)
    assert counts == []


def test_a_call_no_signature_takes_goes_through_python_and_says_why():
    counts = serve("ffi_ct.axpy")
    x = np.ones((2, 2), np.float16)
    with pytest.raises(Exception, match=r"plugin 'ffi_test_compiled' kernel for 'ffi_ct.axpy' "
                                        r"raised TypeError: No matching definition"):
        jax.block_until_ready(jax.jit(lambda x: axpy_call(x, x, alpha=1.0))(x))
    assert counts == [1]


def test_a_raising_nopython_kernel_is_an_error_with_its_message_then_the_next_call_works():
    counts = serve("ffi_ct.axpy")
    x = np.arange(4, dtype=np.float32)
    f = jax.jit(lambda x, a: axpy_call(x, x, alpha=a), static_argnums=1)
    for _ in range(2):
        with pytest.raises(Exception, match=r"kernel for 'ffi_ct.axpy' raised ValueError: "
                                            r"alpha must not be negative"):
            jax.block_until_ready(f(x, -1.0))
        np.testing.assert_array_equal(f(x, 1.0), 2 * x)
    assert len(counts) == 2   # only the failing calls entered Python


@pytest.mark.parametrize("wdtype", [np.float32, np.int32])
def test_array_attribute_and_two_results(wdtype):
    counts = serve("ffi_ct.weighted")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    w = np.array([1, 2, 3, 4], wdtype)
    out, sums = jax.jit(lambda x: jax.ffi.ffi_call(
        "ffi_ct.weighted", (jax.ShapeDtypeStruct(x.shape, x.dtype),
                            jax.ShapeDtypeStruct(x.shape[:1], x.dtype)))(x, weights=w))(x)
    want = jax.jit(lambda x: (x * w.astype(np.float32), jnp.sum(x * w.astype(np.float32), 1)))(x)
    np.testing.assert_array_equal(out, want[0])
    np.testing.assert_allclose(sums, want[1], rtol=1e-6)
    assert counts == []


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4)])
def test_bool_buffers(shape):
    counts = serve("ffi_ct.xor")
    rng = np.random.default_rng(0)
    a, b = rng.random(shape) < 0.5, rng.random(shape) < 0.5
    got = jax.jit(lambda a, b: jax.ffi.ffi_call(
        "ffi_ct.xor", jax.ShapeDtypeStruct(a.shape, a.dtype))(a, b))(a, b)
    np.testing.assert_array_equal(got, jax.jit(jnp.logical_xor)(a, b))
    assert counts == []


def test_many_threads_and_xlas_own_concurrent_calls():
    counts = serve("ffi_ct.axpy")

    def f(x):  # eight independent calls XLA may run at once, in each of 8 threads
        return sum(axpy_call(x, x + k, alpha=float(k)) for k in range(8))
    jf = jax.jit(f)
    inputs = [np.full((256,), k, np.float32) for k in range(8)]
    want = [np.asarray(jax.jit(lambda x: sum(x * k + x + k for k in range(8)))(v))
            for v in inputs]
    errors = []

    def worker(k):
        for _ in range(25):
            got = np.asarray(jf(inputs[k]))
            if not np.array_equal(got, want[k]):
                errors.append(k)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and counts == []
