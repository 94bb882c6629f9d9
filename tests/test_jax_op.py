"""xlaplug.jax.op: plugin ops as jax functions, with jax as the oracle.

Every bundled op with a decomposition under jit, grad and vmap against the same math in jnp;
the kernel path (an FFI call, run here by xlaplug.jax.jit, its gradient the decomposition's);
a plugin's own vjp rule; an op without a CPU kernel; a kernel-only op differentiated; export.
"""
import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug.jax as xj  # noqa: E402
from xlaplug.plugin import Plugin  # noqa: E402
from xlaplug.plugin.api import PluginError  # noqa: E402
from xlaplug.xla import jax_targets  # noqa: E402

pytestmark = pytest.mark.jax

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 8)).astype(np.float32)
SCALE = RNG.standard_normal(8).astype(np.float32)


def swish_math(x, beta):
    return x * jax.nn.sigmoid(beta * x)


def acme(offset: float = 0.0, rule: bool = False) -> Plugin:
    """acme.swish (shape, decomposition, CPU kernel off by `offset`); acme.softplus (no CPU
    kernel: CUDA only); acme.twice (a CPU kernel only)."""
    p = Plugin("acme_jax_op", version="0")

    @p.shape("acme.swish")
    def swish_shape(x, *, beta=1.0):
        return x

    @p.decomposition("acme.swish")
    def swish_decomposition(b, x, *, beta=1.0):
        return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

    @p.kernel("acme.swish", device="cpu", vmap_method="broadcast_all")
    def swish_kernel(x, out, *, beta=1.0):
        out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x)) + x.dtype.type(offset)

    if rule:  # a straight-through gradient: recognisably not swish's
        @p.vjp("acme.swish")
        def swish_vjp(b, operands, result, cotangent, *, beta=1.0):
            return [b.multiply(cotangent, b.constant(2.0, cotangent.dtype))]

    @p.shape("acme.softplus")
    def softplus_shape(x):
        return x

    @p.decomposition("acme.softplus")
    def softplus_decomposition(b, x):
        return b.log_plus_one(b.exponential(x))

    @p.kernel("acme.softplus", device="cuda")
    def softplus_cuda(x, out):
        out[...] = np.log1p(np.exp(x))

    @p.shape("acme.twice")
    def twice_shape(x):
        return x

    @p.kernel("acme.twice", device="cpu")
    def twice_kernel(x, out):
        out[...] = 2 * x
    return p


def registered(monkeypatch, *names):
    """Make `kernel_target` report `names` registered (as xlaplug.jax.register will)."""
    monkeypatch.setattr(jax_targets, "kernel_target",
                        lambda op, platform: op if op in names and platform == "cpu" else None)


# ---- bundled ops on the decomposition path --------------------------------------------------

def rms_math(x, scale, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale


@pytest.mark.slow
def test_rms_norm_jit_grad_vmap_against_jnp():
    rms = xj.op("example.rms_norm")
    f = jax.jit(lambda x, s: rms(x, s, epsilon=1e-5))
    np.testing.assert_allclose(f(X, SCALE), rms_math(X, SCALE, 1e-5), rtol=2e-6, atol=2e-6)

    def loss(fn):
        return lambda x, s: jnp.sum(jnp.sin(fn(x, s)))
    got = jax.jit(jax.grad(loss(lambda x, s: rms(x, s, epsilon=1e-5)), argnums=(0, 1)))(X, SCALE)
    want = jax.grad(loss(lambda x, s: rms_math(x, s, 1e-5)), argnums=(0, 1))(X, SCALE)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    xs = np.stack([X, 2 * X, -X])
    got = jax.vmap(lambda x: rms(x, SCALE, epsilon=1e-5))(xs)
    np.testing.assert_allclose(got, jax.vmap(lambda x: rms_math(x, SCALE, 1e-5))(xs),
                               rtol=2e-6, atol=2e-6)
    # forward mode too: the decomposition is plain lax ops
    t = jax.jvp(lambda x: rms(x, SCALE, epsilon=1e-5), (X,), (X,))[1]
    np.testing.assert_allclose(t, jax.jvp(lambda x: rms_math(x, SCALE, 1e-5), (X,), (X,))[1],
                               rtol=1e-5, atol=1e-5)


HOROVOD = [("HorovodAllreduce", {"reduce_op": "sum"}, lambda x: x),
           ("HorovodAllreduce", {"reduce_op": "average"}, lambda x: x),
           ("HorovodAllreduce", {"reduce_op": "max"}, lambda x: x),
           ("HorovodAllgather", {}, lambda x: x),
           ("HorovodBroadcast", {"root_rank": 0}, lambda x: x),
           ("HorovodAlltoall", {}, lambda x: x),
           ("HorovodReducescatter", {"reduce_op": "product"}, lambda x: x)]


@pytest.mark.parametrize("name,attrs,math", HOROVOD, ids=[f"{n}-{a}" for n, a, _ in HOROVOD])
def test_horovod_on_one_device_jit_grad_vmap(name, attrs, math):
    """Without axis_name the op runs on one device: every collective is over itself (jax's
    psum and friends over a one-device axis give the same)."""
    f = xj.op(name)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_array_equal(jax.jit(lambda v: f(v, **attrs))(x), math(x))
    g = jax.grad(lambda v: jnp.sum(jnp.cos(f(v, **attrs))))(x)
    np.testing.assert_allclose(g, jax.grad(lambda v: jnp.sum(jnp.cos(math(v))))(x), rtol=1e-6)
    xs = np.stack([x, x + 1])
    np.testing.assert_array_equal(jax.vmap(lambda v: f(v, **attrs))(xs), xs)


def test_horovod_integer_allreduce_keeps_its_dtype():
    x = np.arange(8, dtype=np.int32)
    got = jax.jit(lambda v: xj.op("HorovodAllreduce")(v, reduce_op="max"))(x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, x)


# ---- paths ------------------------------------------------------------------------------------

def test_decomposition_path_without_a_registered_target_exports_plain_stablehlo():
    swish = xj.op("acme.swish", plugins=[acme()])
    exported = jax.export.export(jax.jit(lambda x: swish(x, beta=1.5)))(X)
    ops = set(re.findall(r"(?:stablehlo|chlo)\.\w+", exported.mlir_module()))
    assert "stablehlo.custom_call" not in ops and "stablehlo.exponential" in ops, ops
    np.testing.assert_allclose(exported.call(X), swish_math(X, 1.5), rtol=1e-6, atol=1e-6)


def test_kernel_path_is_an_ffi_call_served_by_the_kernel_its_gradient_the_decompositions(
        monkeypatch):
    registered(monkeypatch, "acme.swish")
    plugin = acme(offset=0.5)  # the kernel is off by 0.5: it shows where it served
    swish = xj.op("acme.swish", plugins=[plugin])
    hlo = jax.jit(lambda x: swish(x, beta=1.5)).lower(X).as_text(dialect="hlo")
    assert 'custom_call_target="acme.swish"' in hlo
    got = xj.jit(lambda x: swish(x, beta=1.5), plugins=[plugin])(X)
    np.testing.assert_allclose(got, swish_math(X, 1.5) + 0.5, rtol=1e-5, atol=1e-5)
    # grad: the forward is the kernel, the backward the VJP of the decomposition
    grad = xj.jit(jax.grad(lambda x: jnp.sum(swish(x, beta=1.5))), plugins=[plugin])(X)
    np.testing.assert_allclose(grad, jax.grad(lambda x: jnp.sum(swish_math(x, 1.5)))(X),
                               rtol=1e-5, atol=1e-5)
    # jvp: the kernel's values, the decomposition's tangents (forward mode, as on the
    # decomposition path)
    y, t = xj.jit(lambda x: jax.jvp(lambda v: swish(v, beta=1.5), (x,), (x,)),
                  plugins=[plugin])(X)
    want_y, want_t = jax.jvp(lambda v: swish_math(v, 1.5), (X,), (X,))
    np.testing.assert_allclose(y, want_y + 0.5, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t, want_t, rtol=1e-5, atol=1e-5)
    # vmap: the kernel's declared vmap_method batches the FFI call itself
    xs = np.stack([X, -X])
    vhlo = jax.jit(jax.vmap(lambda x: swish(x, beta=1.5))).lower(xs).as_text(dialect="hlo")
    assert 'custom_call_target="acme.swish"' in vhlo and "while" not in vhlo
    got = xj.jit(jax.vmap(lambda x: swish(x, beta=1.5)), plugins=[plugin])(xs)
    np.testing.assert_allclose(got, swish_math(xs, 1.5) + 0.5, rtol=1e-5, atol=1e-5)
    # prefer="decomposition" forces the lax ops
    dec = xj.op("acme.swish", plugins=[plugin], prefer="decomposition")
    assert "custom_call" not in jax.jit(lambda x: dec(x, beta=1.5)).lower(X).as_text()


def test_prefer_kernel_without_a_registered_target_is_an_error():
    with pytest.raises(PluginError, match="prefer='kernel' but no FFI target is registered"):
        xj.op("acme.swish", plugins=[acme()], prefer="kernel")(X, beta=1.0)


def test_a_plugin_vjp_rule_gives_the_gradient():
    swish = xj.op("acme.swish", plugins=[acme(rule=True)])
    g = jax.jit(jax.grad(lambda x: jnp.sum(swish(x, beta=1.5))))(X)
    np.testing.assert_array_equal(g, np.full_like(X, 2.0))
    np.testing.assert_allclose(swish(X, beta=1.5), swish_math(X, 1.5), rtol=1e-6, atol=1e-6)


def test_op_without_a_cpu_kernel_runs_its_decomposition():
    softplus = xj.op("acme.softplus", plugins=[acme()])
    np.testing.assert_allclose(jax.jit(softplus)(X), jax.nn.softplus(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(softplus(x)))(X), jax.nn.sigmoid(X),
                               rtol=1e-6, atol=1e-6)


def test_kernel_only_op_runs_its_kernel_and_refuses_to_be_differentiated(monkeypatch):
    twice = xj.op("acme.twice", plugins=[acme()])
    with pytest.raises(PluginError, match="no decomposition and no kernel registered"):
        twice(X)
    registered(monkeypatch, "acme.twice")
    np.testing.assert_array_equal(xj.jit(twice, plugins=[acme()])(X), 2 * X)
    with pytest.raises(PluginError, match=r"op 'acme.twice' cannot be differentiated: it has a "
                                          r"kernel but no decomposition and no "
                                          r"@plugin.vjp\('acme.twice'\) rule"):
        jax.make_jaxpr(jax.grad(lambda x: jnp.sum(twice(x))))(X)


def test_attributes_are_typed_as_ffi_call_types_them():
    seen = {}
    p = Plugin("attrs_probe", version="0")

    @p.shape("probe.id")
    def shape(x, **attrs):
        seen.update(attrs)
        return x

    @p.decomposition("probe.id")
    def decomposition(b, x, **attrs):
        return b.copy(x)
    xj.op("probe.id", plugins=[p])(X, f=1.5, i=3, flag=True, name="n", v=(1, 2),
                                   e=np.float32(0.5))
    assert type(seen["f"]) is np.float64 and type(seen["i"]) is np.int64
    assert seen["flag"] is True and seen["name"] == "n" and type(seen["e"]) is np.float32
    assert seen["v"] == (1, 2) and all(type(v) is np.int64 for v in seen["v"])
    with pytest.raises(PluginError, match="attribute f= must be a static value"):
        jax.jit(lambda x: xj.op("probe.id", plugins=[p])(x, f=x[0, 0]))(X)


def test_unknown_op_and_unbound_axis_are_one_line_errors():
    with pytest.raises(PluginError, match="no plugin op 'example.rms_nrom'.*near matches: "
                                          "'example.rms_norm'"):
        xj.op("example.rms_nrom")
    f = xj.op("HorovodAllreduce", axis_name="i")
    with pytest.raises(PluginError, match="axis_name='i' is not bound here"):
        f(X)


def test_shape_rule_disagreeing_with_the_decomposition_is_named():
    p = Plugin("liar", version="0")
    p.shape("liar.op")(lambda x: x)
    p.decomposition("liar.op")(lambda b, x: b.reshape(x, (x.shape.num_elements(),)))
    with pytest.raises(PluginError, match=r"decomposition of 'liar.op' gives f32\[24\] but its "
                                          r"shape rule says f32\[3,8\]"):
        xj.op("liar.op", plugins=[p])(X)


def test_a_plugin_op_inside_a_decomposition_is_that_ops_jax_function():
    """A decomposition that builds a custom call to another plugin op gets that op's own jax
    function (here its decomposition), with the call's typed attributes."""
    p = acme()

    @p.shape("acme.swish2")
    def shape(x):
        return x

    @p.decomposition("acme.swish2")
    def decomposition(b, x):
        y = b.op("custom-call", x, custom_call_target="acme.swish", shape=x.shape,
                 backend_config='{"beta": 2.0}')
        return b.add(y, y)
    f = xj.op("acme.swish2", plugins=[p])
    np.testing.assert_allclose(jax.jit(f)(X), 2 * swish_math(X, 2.0), rtol=1e-6, atol=1e-6)
    hlo = jax.jit(f).lower(X).as_text(dialect="hlo")
    assert "custom-call" not in hlo


def test_jaxlibs_own_lapack_targets_are_served_by_their_decompositions():
    """jaxlib's handlers under jax_lapack's names are no kernel path for op() (they want
    jax's column-major layouts): the op runs as its decomposition (issue 26), as jnp does."""
    a = np.array([[4, 2], [2, 3]], np.float32)
    factor, info = xj.op("lapack_spotrf_ffi")(a, uplo=np.uint8(76))
    assert int(info) == 0
    np.testing.assert_allclose(np.tril(np.asarray(factor)), np.linalg.cholesky(a), rtol=1e-6)


def test_plugin_api_vmap_method_and_vjp_registration():
    p = Plugin("bad_vmap", version="0")
    with pytest.raises(PluginError, match="vmap_method must be one of sequential"):
        p.kernel("x.op", device="cpu", vmap_method="magic")
    a, b = Plugin("va", version="0"), Plugin("vb", version="0")
    for q in (a, b):
        q.vjp("x.op")(lambda b, ops, r, ct: [ct])
    with pytest.raises(PluginError, match="op 'x.op' is provided by both plugin 'va' and "
                                          "plugin 'vb'"):
        from xlaplug import load_session
        load_session([a, b], strict=True, bundled=False)


def test_an_op_with_two_results():
    p = Plugin("sincos", version="0")

    @p.shape("acme.sincos")
    def shape(x):
        return (x, x)

    @p.decomposition("acme.sincos")
    def decomposition(b, x):
        return b.sine(x), b.cosine(x)
    f = xj.op("acme.sincos", plugins=[p])
    s, c = jax.jit(f)(X)
    np.testing.assert_allclose(s, np.sin(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c, np.cos(X), rtol=1e-6, atol=1e-6)
    g = jax.grad(lambda x: jnp.sum(f(x)[0] * f(x)[1]))(X)
    np.testing.assert_allclose(g, np.cos(2 * X), rtol=1e-5, atol=1e-5)
    vs, vc = jax.vmap(f)(np.stack([X, -X]))
    assert vs.shape == vc.shape == (2,) + X.shape
