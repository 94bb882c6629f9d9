"""xlaplug.jax: JAX functions lowered by jax, run by xlaplug (plugin kernels serving
`jax.ffi.ffi_call` targets), and checked against XLA:CPU running the decompositions."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug.jax as xj  # noqa: E402
from xlaplug.hlo.errors import HloError  # noqa: E402
from xlaplug.plugin import Plugin  # noqa: E402


def swish_plugin(offset: float = 0.0) -> Plugin:
    """acme.swish as a Plugin object (no file): x * sigmoid(beta x), its kernel off by
    `offset`."""
    p = Plugin("acme_test", version="0")

    @p.shape("acme.swish")
    def shape(x, *, beta=1.0):
        return x

    @p.decomposition("acme.swish")
    def decomposition(b, x, *, beta=1.0):
        return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

    @p.kernel("acme.swish", device="cpu")
    def kernel(x, out, *, beta=1.0):
        out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x)) + x.dtype.type(offset)
    return p


def swish(x, beta=1.5):
    call = jax.ffi.ffi_call("acme.swish", jax.ShapeDtypeStruct(x.shape, x.dtype))
    return call(x, beta=np.float32(beta))


def model(x, w):
    h = swish(x @ w)
    return {"h": h, "norm": jnp.sqrt(jnp.sum(h * h))}


X = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)


def test_jit_runs_plain_jax_like_jax_with_the_output_tree():
    def f(x, i):
        return (x * 2 + 1, {"s": jnp.sum(x, axis=0), "i": i % 3})
    i = np.arange(5, dtype=np.int32)
    got = xj.jit(f)(X, i)
    want = jax.jit(f)(X, i)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype
        np.testing.assert_array_equal(g, np.asarray(w))


def test_ffi_call_served_by_a_plugin_kernel_cached_per_signature():
    jf = xj.jit(model, plugins=[swish_plugin()])
    out = jf(X, W)
    h = X @ W
    np.testing.assert_allclose(out["h"], h / (1 + np.exp(-1.5 * h)), rtol=1e-5, atol=1e-6)
    jf(X + 1, W)
    assert jf.cache_size == 1
    jf(X[:2], W)
    assert jf.cache_size == 2
    # the kernel ran (not the decomposition): an offset kernel shows through
    off = xj.jit(model, plugins=[swish_plugin(0.5)])(X, W)
    np.testing.assert_allclose(off["h"] - out["h"], 0.5, rtol=1e-5)


def test_check_against_xla_running_the_decomposition():
    report = xj.check(model, X, W, plugins=[swish_plugin()])
    assert report.ok, str(report)
    assert [d.name for d in report.outputs] == ["out0", "out1"]
    assert "custom-call" not in report.portable_hlo and "logistic(" in report.portable_hlo
    assert "max ULP" in str(report)
    bad = xj.check(model, X, W, plugins=[swish_plugin(0.01)])
    assert not bad.ok and not bad.outputs[0].ok and bad.outputs[0].max_abs > 0.005


def test_target_no_plugin_provides_is_named_with_near_matches():
    def g(x):
        return jax.ffi.ffi_call("acme.swsh", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    with pytest.raises(HloError) as e:
        xj.jit(g, plugins=[swish_plugin()])(X)
    head = e.value.headline()
    assert "no plugin provides target 'acme.swsh'" in head
    assert head.endswith("near matches: 'acme.swish'")
    assert "\n" not in head


def test_arguments_that_do_not_fit():
    with pytest.raises(HloError, match="dtype object is not an array type jax lowers"):
        xj.jit(lambda x: x)(np.array([object()]))
    with pytest.raises(HloError, match="plugins: expected plugin directories or Plugin"):
        xj.jit(lambda x: x, plugins=[42])
    # f64 without x64 is lowered (and run) as f32, as jax.jit does (x64 off explicitly:
    # other test files switch it on for their whole module)
    with jax.enable_x64(False):
        got = xj.jit(lambda x: x * 3)(np.arange(3, dtype=np.float64))
    assert got.dtype == np.float32
