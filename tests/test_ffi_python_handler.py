"""Plugin kernels served inside XLA by the Python FFI handler (xlaplug/xla/ffi), with jax
as the oracle: zero-copy views, every attribute kind arriving as the interpreter gives it,
several operands and results, ranks 0-4, every dtype, errors, and threads."""
import threading

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug.jax as xj  # noqa: E402
from xlaplug.plugin import Plugin  # noqa: E402
from xlaplug.xla.ffi import PYTHON, register_op  # noqa: E402

pytestmark = pytest.mark.jax


def served(plugin: Plugin, op: str):
    s = register_op(op, plugin.kernels[(op, "cpu")])
    assert s.how == PYTHON, s
    return s


def call(op, results, *operands, **attrs):
    return jax.ffi.ffi_call(op, results)(*operands, **attrs)


# A kernel that records what it was given, so the FFI's arguments can be set beside the
# interpreter's for the same jax function.
_SEEN: dict = {}
recorder = Plugin("ffi_test_recorder")


@recorder.kernel("ffi_test.record")
def record(x, y, out0, out1, **attrs):
    _SEEN.setdefault(threading.get_ident(), []).append(attrs)
    out0[...] = x + y
    out1[...] = x * y


ATTRS = dict(f32=np.float32(2.5), f64=np.float64(-1.25), i32=np.int32(7), i64=np.int64(-9),
             u8=np.uint8(200), flag=True, off=False, name="rms", pyint=3, pyfloat=0.5,
             vec=np.array([1, 2, 3], np.int64), fvec=np.array([0.5, 1.5], np.float32),
             nested={"k": np.int32(4), "s": "x", "v": np.float32(1.0)})


def record_call(x, y):
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return call("ffi_test.record", (shape, shape), x, y, **ATTRS)


def _same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


def test_every_attribute_kind_arrives_as_the_interpreter_gives_it():
    served(recorder, "ffi_test.record")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 3, np.float32)
    _SEEN.clear()
    s, p = jax.jit(record_call)(x, y)
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_array_equal(p, x * y)
    (ffi,) = [a for calls in _SEEN.values() for a in calls]
    _SEEN.clear()
    xj.jit(record_call, plugins=[recorder])(x, y)   # the interpreter, the same HLO
    (interp,) = [a for calls in _SEEN.values() for a in calls]
    assert ffi.keys() == interp.keys() == ATTRS.keys()
    for k in ATTRS:
        assert _same(ffi[k], interp[k]), (k, ffi[k], interp[k])
    assert ffi["flag"] is True and ffi["name"] == "rms" and ffi["nested"]["s"] == "x"
    assert ffi["u8"] == 200 and ffi["vec"].tolist() == [1, 2, 3]


views = Plugin("ffi_test_views")


@views.kernel("ffi_test.where")
def where_kernel(x, out, **_):
    # the operand is XLA's buffer itself: a view, read-only to numpy, no copy
    assert not x.flags.owndata and not out.flags.owndata and x.flags.c_contiguous
    out[...] = x


def test_buffers_are_views_of_xlas_memory():
    served(views, "ffi_test.where")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = jax.jit(lambda v: call("ffi_test.where", jax.ShapeDtypeStruct(v.shape, v.dtype),
                                 v))(x)
    np.testing.assert_array_equal(got, x)


poly = Plugin("ffi_test_poly")


@poly.kernel("ffi_test.mix")
def mix(a, b, c, total, prod, *, scale=1.0, element_types=()):
    # three operands and two results; `element_types` as the interpreter gives it
    from xlaplug.hlo.dtypes import from_dtype
    assert element_types == tuple(from_dtype(v.dtype) for v in (a, b, c, total, prod))
    total[...] = (a.astype(np.float64) + b.astype(np.float64) + c) * scale
    prod[...] = a * b * c


DTYPES = [np.float16, "bfloat16", np.float32, np.float64, np.int8, np.int32, np.int64,
          np.uint8, np.uint32, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(jnp.dtype(d)).name)
@pytest.mark.parametrize("rank", [0, 1, 2, 3, 4])
def test_dtypes_and_ranks_against_jnp(dtype, rank):
    served(poly, "ffi_test.mix")
    shape = (2, 3, 1, 2)[:rank]
    rng = np.random.default_rng(rank)
    with jax.enable_x64(True):
        dt = jnp.dtype(dtype)
        a, b, c = (jnp.asarray(rng.standard_normal(shape) * 3).astype(dt) for _ in range(3))

        def f(a, b, c):
            outs = (jax.ShapeDtypeStruct(a.shape, jnp.float64),
                    jax.ShapeDtypeStruct(a.shape, a.dtype))
            return call("ffi_test.mix", outs, a, b, c, scale=np.float32(2))
        total, prod = jax.jit(f)(a, b, c)
        want_total = jax.jit(lambda a, b, c: (a.astype(jnp.float64) + b.astype(jnp.float64) +
                                              c.astype(jnp.float64)) * 2)(a, b, c)
        want_prod = jax.jit(lambda a, b, c: a * b * c)(a, b, c)
    assert total.dtype == np.float64 and prod.dtype == dt and total.shape == shape
    np.testing.assert_allclose(np.asarray(total), np.asarray(want_total), rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(prod), np.asarray(want_prod))


failing = Plugin("ffi_test_failing")


@failing.kernel("ffi_test.checked_sqrt")
def checked_sqrt(x, out):
    if (x < 0).any():
        raise ValueError(f"negative input at {int(np.argmax(x < 0))}")
    out[...] = np.sqrt(x)


@failing.kernel("ffi_test.returns")
def returns_result(x, out):
    return x[::-1] * 2   # a returned value is written into the result, as in the interpreter


def test_a_raising_kernel_is_an_xla_error_naming_plugin_op_and_message_then_next_call_works():
    served(failing, "ffi_test.checked_sqrt")
    f = jax.jit(lambda v: call("ffi_test.checked_sqrt", jax.ShapeDtypeStruct(v.shape, v.dtype), v))
    bad = np.array([1.0, -4.0, 9.0], np.float32)
    for _ in range(2):
        with pytest.raises(Exception, match=r"plugin 'ffi_test_failing' kernel for "
                                            r"'ffi_test.checked_sqrt' raised ValueError: "
                                            r"negative input at 1"):
            jax.block_until_ready(f(bad))
        np.testing.assert_array_equal(f(np.abs(bad)), np.sqrt(np.abs(bad)))


def test_a_returned_value_is_written_into_the_result_and_a_wrong_one_is_an_error():
    served(failing, "ffi_test.returns")
    x = np.arange(4, dtype=np.float32)
    same = jax.ShapeDtypeStruct(x.shape, x.dtype)
    np.testing.assert_array_equal(jax.jit(lambda v: call("ffi_test.returns", same, v))(x),
                                  x[::-1] * 2)
    wrong = jax.ShapeDtypeStruct((2,), x.dtype)
    with pytest.raises(Exception, match=r"returned output 0 as float32\[4\], the result "
                                        r"buffer is float32\[2\]"):
        jax.block_until_ready(jax.jit(lambda v: call("ffi_test.returns", wrong, v))(x))


def test_many_threads_call_the_same_handler_at_once():
    served(failing, "ffi_test.checked_sqrt")
    f = jax.jit(lambda v: call("ffi_test.checked_sqrt", jax.ShapeDtypeStruct(v.shape, v.dtype),
                               v) + 0)
    inputs = [np.full((64,), k, np.float32) for k in range(16)]
    got: dict = {}

    def worker(k):
        for _ in range(20):
            got[k] = np.asarray(f(inputs[k]))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(16):
        np.testing.assert_array_equal(got[k], np.sqrt(inputs[k]))
