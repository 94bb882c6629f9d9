"""The jax builder: the HLO Builder's methods, evaluated with lax, against the same math in
jnp (jax is the oracle), under jit and grad; collectives without an axis; nested plugin ops;
the error for an opcode with no lax equivalent."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from xlaplug.hlo.attr_types import (Padding, PadDim, SliceDim, SliceRanges, Window,  # noqa: E402
                                    WindowDim, Word)
from xlaplug.hlo.builder import Builder  # noqa: E402
from xlaplug.hlo.errors import HloError  # noqa: E402
from xlaplug.hlo.ir import Computation, Shape  # noqa: E402
from xlaplug.xla.jax_builder import JaxBuilder  # noqa: E402
from xlaplug.xla.jax_lowering import binary_monoid  # noqa: E402

pytestmark = pytest.mark.jax

R = np.random.default_rng(3)
A = R.standard_normal((3, 4)).astype(np.float32)
B = R.standard_normal((3, 4)).astype(np.float32)
M = R.standard_normal((4, 5)).astype(np.float32)
V = R.standard_normal(4).astype(np.float32)
I = R.integers(-20, 20, (3, 4)).astype(np.int32)


def run(build, *args, jit=True):
    """build(b, *values) with a JaxBuilder over `args`, as one (jitted) jax function."""
    def f(*xs):
        b = JaxBuilder()
        return b.value(build(b, *[b.input(x) for x in xs]))
    return (jax.jit(f) if jit else f)(*args)


def _reducer(b, opcode, etype):
    return b.scalar_computation(f"r_{opcode}", opcode, etype)


CASES = {
    # elementwise, scalars broadcast as the HLO builder broadcasts them
    "add_scalar": (lambda b, x: b.add(x, b.constant(2.0, x.dtype)), (A,), lambda x: x + 2),
    "unary_chain": (lambda b, x: b.tanh(b.exponential_minus_one(b.log_plus_one(b.abs(x)))),
                    (A,), lambda x: jnp.tanh(jnp.expm1(jnp.log1p(jnp.abs(x))))),
    "rsqrt_logistic": (lambda b, x: b.rsqrt(b.logistic(x)), (A,),
                       lambda x: jax.lax.rsqrt(jax.nn.sigmoid(x))),
    "power_atan2": (lambda b, x, y: b.atan2(b.power(b.abs(x), y), y), (A, B),
                    lambda x, y: jnp.arctan2(jnp.abs(x) ** y, y)),
    "int_ops": (lambda b, x: b.remainder(b.shift_left(b.xor(x, b.constant(5, "s32")),
                                                     b.constant(1, "s32")), b.constant(7, "s32")),
                (I,), lambda x: jax.lax.rem((x ^ 5) << 1, 7)),
    "round_afz_sign": (lambda b, x: b.add(b.round_nearest_afz(b.multiply(x, b.constant(3.0))),
                                          b.sign(x)), (A,),
                       lambda x: jax.lax.round(3 * x) + jnp.sign(x)),
    "compare_select": (lambda b, x, y: b.select(b.compare(x, y, direction=Word("GT")), x, y),
                       (A, B), jnp.maximum),
    "clamp": (lambda b, x: b.clamp(b.constant(-0.5), x, b.constant(0.5)), (A,),
              lambda x: jnp.clip(x, -0.5, 0.5)),
    "convert": (lambda b, x: b.convert(b.multiply(x, b.constant(10.0)), "s32"), (A,),
                lambda x: (x * 10).astype(jnp.int32)),
    "bitcast_convert": (lambda b, x: b.op("bitcast-convert", x,
                                          shape=Shape.array("u32", x.shape.dims)),
                        (A,), lambda x: jax.lax.bitcast_convert_type(x, jnp.uint32)),
    # data movement
    "broadcast": (lambda b, v: b.broadcast(v, (3, 4), (1,)), (V,),
                  lambda v: jnp.broadcast_to(v, (3, 4))),
    "reshape_transpose": (lambda b, x: b.transpose(b.reshape(x, (2, 6)), dimensions=(1, 0)),
                          (A,), lambda x: x.reshape(2, 6).T),
    "slice": (lambda b, x: b.slice(x, slice=SliceRanges((SliceDim(1, 3), SliceDim(0, 4, 2)))),
              (A,), lambda x: x[1:3, 0:4:2]),
    "dynamic_slice": (lambda b, x: b.dynamic_slice(x, b.constant(2, "s32"), b.constant(1, "s32"),
                                                   dynamic_slice_sizes=(2, 2)), (A,),
                      lambda x: jax.lax.dynamic_slice(x, (2, 1), (2, 2))),  # start clamped
    "dynamic_update_slice": (lambda b, x, y: b.dynamic_update_slice(
        x, b.reshape(b.slice(y, slice=SliceRanges((SliceDim(0, 1), SliceDim(0, 2)))), (1, 2)),
        b.constant(1, "s32"), b.constant(2, "s32")), (A, B),
        lambda x, y: jnp.asarray(x).at[1:2, 2:4].set(y[0:1, 0:2])),
    "concatenate": (lambda b, x, y: b.concatenate(x, y, dimensions=(0,)), (A, B),
                    lambda x, y: jnp.concatenate([x, y], 0)),
    "iota": (lambda b, x: b.add(x, b.convert(b.iota("s32", (3, 4), 1), "f32")), (A,),
             lambda x: x + jnp.arange(4, dtype=jnp.float32)),
    "pad": (lambda b, x: b.pad(x, b.constant(0.0), padding=Padding((PadDim(1, 0, 1),
                                                                    PadDim(0, 2, 0)))), (A,),
            lambda x: jax.lax.pad(x, 0.0, [(1, 0, 1), (0, 2, 0)])),
    "reverse": (lambda b, x: b.reverse(x, dimensions=(1,)), (A,), lambda x: x[:, ::-1]),
    # dot and reductions
    "dot": (lambda b, x, m: b.dot(x, m), (A, M), lambda x, m: x @ m),
    "dot_general_batch": (lambda b, x, y: b.dot(x, y, lhs_contracting=(1,), rhs_contracting=(1,),
                                                lhs_batch=(0,), rhs_batch=(0,)), (A, B),
                          lambda x, y: jnp.sum(x * y, axis=1)),
    "reduce_add_init": (lambda b, x: b.reduce(x, b.constant(1.5), [1], _reducer(b, "add", "f32")),
                        (A,), lambda x: x.sum(1) + 1.5),
    "reduce_max": (lambda b, x: b.reduce(x, b.constant(-np.inf), [0],
                                         _reducer(b, "maximum", "f32")), (A,),
                   lambda x: x.max(0)),
    "reduce_window": (lambda b, x: b.reduce_window(
        x, b.constant(0.0), window=Window((WindowDim(size=2), WindowDim(size=2, stride=2))),
        to_apply=_reducer(b, "add", "f32")), (A,),
        lambda x: jax.lax.reduce_window(x, 0.0, jax.lax.add, (2, 2), (1, 2), "VALID")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_builder_method_against_jnp(case):
    build, args, math = CASES[case]
    got = run(build, *args)
    want = math(*args)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def xla_run(build, *args):
    """The same build with the HLO Builder, as a module run by XLA:CPU: its one output."""
    from xlaplug.hlo.ir import Module
    from xlaplug.hlo.text.printer import module_to_text
    from xlaplug.xla.xla_executables import run_on_xla_cpu
    from xlaplug.xla.jax_builder import shape_of
    b = Builder("e")
    params = [b.parameter(k, shape_of(np.asarray(a))) for k, a in enumerate(args)]
    root = build(b, *params)
    entry = Computation("e", b.instructions, root)
    text = module_to_text(Module("m", [*b.computations, entry], entry))
    ((out,),) = run_on_xla_cpu(text, [[np.asarray(a) for a in args]])
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_builder_method_as_xla_runs_the_same_hlo(case):
    """The jax builder against XLA:CPU running what the HLO Builder builds from the same
    calls: the attribute conventions (clamped dynamic-slice starts, padding, windows) agree."""
    build, args, _ = CASES[case]
    got, want = np.asarray(run(build, *args)), xla_run(build, *args)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_reduce_with_a_reducer_lax_has_no_monoid_for():
    """A reducer that is not a recognised monoid runs as lax.reduce with the computation as a
    jax function: here max spelled as select(compare(p0, p1, GT), p0, p1)."""
    rb = Builder("r")
    p0, p1 = (rb.parameter(k, Shape.array("f32", ())) for k in (0, 1))
    root = rb.select(rb.compare(p0, p1, direction=Word("GT")), p0, p1)
    comp = Computation("r", rb.instructions, root)
    assert binary_monoid(comp) is None
    got = run(lambda b, x: b.reduce(x, b.constant(-np.inf), [1], comp), A)
    np.testing.assert_array_equal(got, A.max(1))
    jaxpr = str(jax.make_jaxpr(lambda x: run(lambda b, v: b.reduce(
        v, b.constant(-np.inf), [1], comp), x, jit=False))(A))
    assert "reduce_max" not in jaxpr and "reduce" in jaxpr


def test_monoid_reducers_are_lax_monoids():
    """add / max reducers become reduce_sum / reduce_max: jax differentiates those."""
    jaxpr = str(jax.make_jaxpr(lambda x: run(lambda b, v: b.reduce(
        v, b.constant(0.0), [0], _reducer(b, "add", "f32")), x, jit=False))(A))
    assert "reduce_sum" in jaxpr


def test_while_and_conditional_run_their_computations():
    def build(b, x):
        s = x.shape
        # while: x *= 2 until sum(x) > 100 -- condition and body as computations
        cb = Builder("c")
        cp = cb.parameter(0, s)
        add = cb.scalar_computation("add", "add", "f32")
        cond_root = cb.compare(cb.reduce(cp, cb.constant(0.0), [0, 1], add),
                               cb.constant(100.0), direction=Word("LT"))
        cond = Computation("cond", cb.instructions, cond_root)
        bb = Builder("b")
        bp = bb.parameter(0, s)
        body = Computation("body", bb.instructions, bb.multiply(bp, bb.constant(2.0)))
        w = b.op("while", x, condition=cond, body=body)
        tb = Builder("t")
        tp = tb.parameter(0, s)
        tru = Computation("t", tb.instructions, tb.negate(tp))
        fb = Builder("f")
        fp = fb.parameter(0, s)
        fal = Computation("f", fb.instructions, fb.copy(fp))
        pred = b.compare(b.reduce(w, b.constant(0.0), [0, 1], b.scalar_computation(
            "a2", "add", "f32")), b.constant(150.0), direction=Word("GT"))
        return b.op("conditional", pred, w, w, true_computation=tru, false_computation=fal)
    x = np.abs(A) + 0.1

    def math(x):
        x = jax.lax.while_loop(lambda v: v.sum() < 100, lambda v: v * 2, x)
        return jnp.where(x.sum() > 150, -x, x)
    np.testing.assert_allclose(run(build, x), math(x), rtol=1e-6)


def test_grad_through_built_reduce_dot_and_slices():
    def build(b, x, m):
        y = b.dot(b.tanh(x), m)
        s = b.slice(y, slice=SliceRanges((SliceDim(0, 2), SliceDim(1, 5))))
        return b.reduce(b.multiply(s, s), b.constant(0.0), [0, 1], _reducer(b, "add", "f32"))

    def f(x, m):
        b = JaxBuilder()
        return b.value(build(b, b.input(x), b.input(m)))
    got = jax.jit(jax.grad(f, argnums=(0, 1)))(A, M)
    want = jax.grad(lambda x, m: jnp.sum((jnp.tanh(x) @ m)[0:2, 1:5] ** 2), argnums=(0, 1))(A, M)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_collectives_without_an_axis_are_over_one_device():
    def build(b, x):
        add = b.scalar_computation("add", "add", "f32")
        r = b.op("all-reduce", x, to_apply=add)
        g = b.op("all-gather", r, dimensions=(0,), shape=r.shape)
        return b.add(g, b.convert(b.op("partition-id"), "f32"))
    np.testing.assert_array_equal(run(build, A), A)


def test_tuple_values_and_get_tuple_element():
    def build(b, x, y):
        t = b.tuple(x, y)
        return b.subtract(b.get_tuple_element(t, 1), b.get_tuple_element(t, 0))
    np.testing.assert_allclose(run(build, A, B), B - A)


def test_opcode_with_no_lax_equivalent_is_named():
    with pytest.raises(HloError, match="jax builder: opcode 'after-all' has no lax equivalent"):
        run(lambda b, x: b.op("after-all"), A)


def test_custom_call_inside_a_decomposition_is_an_ffi_call():
    def build(b, x):
        return b.op("custom-call", x, custom_call_target="acme.inner", shape=x.shape)
    text = jax.jit(lambda x: run(build, x, jit=False)).lower(A).as_text(dialect="hlo")
    assert 'custom_call_target="acme.inner"' in text


def test_inputs_keep_hlo_shapes_and_values_are_checked():
    b = JaxBuilder()
    x = b.input(jnp.zeros((2, 3), jnp.int8))
    assert str(x.shape) == "s8[2,3]" and x.dtype == np.int8
    with pytest.raises(HloError, match="not a value this builder made"):
        JaxBuilder().value(x)
    with pytest.raises(HloError, match="axis_size needs an axis_name"):
        JaxBuilder(axis_size=2)


IDX = np.array([[2], [0], [7]], np.int32)  # 7 is out of range: gather clamps it to 2


def test_gather_with_the_index_vector_last_or_implicit():
    def build(b, x, idx):
        return b.op("gather", x, idx, offset_dims=(1,), collapsed_slice_dims=(0,),
                    start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 4))
    np.testing.assert_array_equal(run(build, A, IDX), A[[2, 0, 2]])
    np.testing.assert_array_equal(run(build, A, IDX), xla_run(build, A, IDX))

    def implicit(b, x, idx):  # index_vector_dim == rank: a trailing 1 is implied
        return b.op("gather", x, idx, offset_dims=(1,), collapsed_slice_dims=(0,),
                    start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 4))
    np.testing.assert_array_equal(run(implicit, A, IDX[:, 0]), A[[2, 0, 2]])


def test_scatter_add_and_replace_drop_out_of_range_windows():
    upd = np.arange(12, dtype=np.float32).reshape(3, 4)

    def build(combiner):
        def f(b, x, idx, u):
            return b.op("scatter", x, idx, u, update_window_dims=(1,),
                        inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                        index_vector_dim=1, to_apply=combiner(b))
        return f
    add = build(lambda b: b.scalar_computation("add", "add", "f32"))
    want = jnp.asarray(A).at[jnp.array([2, 0, 7])].add(upd, mode="drop")
    np.testing.assert_array_equal(run(add, A, IDX, upd), want)
    np.testing.assert_array_equal(run(add, A, IDX, upd), xla_run(add, A, IDX, upd))

    def replace(b):
        rb = Builder("rep")
        rb.parameter(0, Shape.array("f32", ()))
        p1 = rb.parameter(1, Shape.array("f32", ()))
        return Computation("rep", rb.instructions, p1)
    want = jnp.asarray(A).at[jnp.array([2, 0, 7])].set(upd, mode="drop")
    np.testing.assert_array_equal(run(build(replace), A, IDX, upd), want)
    # the gradient of a scatter-add reaches operand and updates
    g = jax.grad(lambda u: jnp.sum(run(add, A, IDX, u, jit=False) ** 2))(upd)
    np.testing.assert_allclose(g, jax.grad(lambda u: jnp.sum(jnp.asarray(A).at[
        jnp.array([2, 0, 7])].add(u, mode="drop") ** 2))(upd))


def test_sort_and_map():
    def lt(b):
        cb = Builder("lt")
        p0, p1 = (cb.parameter(k, Shape.array("f32", ())) for k in (0, 1))
        return Computation("lt", cb.instructions, cb.compare(p0, p1, direction=Word("LT")))
    got = run(lambda b, x: b.op("sort", x, dimensions=(1,), to_apply=lt(b)), A)
    np.testing.assert_array_equal(got, np.sort(A, axis=1))

    def square(b):
        cb = Builder("sq")
        p = cb.parameter(0, Shape.array("f32", ()))
        return Computation("sq", cb.instructions, cb.multiply(p, p))
    got = run(lambda b, x: b.op("map", x, dimensions=(0, 1), to_apply=square(b)), A)
    np.testing.assert_allclose(got, A * A)

    def gt(b):
        cb = Builder("gt")
        p0, p1 = (cb.parameter(k, Shape.array("f32", ())) for k in (0, 1))
        return Computation("gt", cb.instructions, cb.compare(p0, p1, direction=Word("GT")))
    with pytest.raises(HloError, match="opcode 'sort' has no lax equivalent"):
        run(lambda b, x: b.op("sort", x, dimensions=(1,), to_apply=gt(b)), A)


def _branches():
    def branch(k):
        cb = Builder(f"br{k}")
        p = cb.parameter(0, Shape.array("f32", ()))
        return Computation(f"br{k}", cb.instructions, cb.add(p, cb.constant(float(k))))
    return [branch(k) for k in range(3)]


@pytest.mark.parametrize("index", [0, 1, 2, 5, -1])
def test_indexed_conditional_out_of_range_as_xla_runs_it(index):
    """An index outside 0..N-1 (negative too): the jax builder picks the branch XLA:CPU does
    for the same HLO."""
    from xlaplug.hlo.ir import Module
    from xlaplug.hlo.text.printer import module_to_text
    from xlaplug.xla.xla_executables import run_on_xla_cpu
    hb = Builder("e")
    i = hb.parameter(0, Shape.array("s32", ()))
    x = hb.parameter(1, Shape.array("f32", ()))
    branches = _branches()
    root = hb.op("conditional", i, x, x, x, branch_computations=branches)
    entry = Computation("e", hb.instructions, root)
    text = module_to_text(Module("cond", [*branches, entry], entry))
    args = [np.int32(index), np.float32(1.0)]
    ((want,),) = run_on_xla_cpu(text, [[np.asarray(a) for a in args]])

    def build(b, i, x):
        return b.op("conditional", i, x, x, x, branch_computations=_branches())
    assert float(run(build, *args)) == float(want)


@pytest.fixture(autouse=True)
def _jax_default_precision():
    """jax's default (32-bit) mode, as a plugin's jax user has it: other test files in the
    same worker turn jax_enable_x64 on, which makes jnp's Python scalars 64-bit."""
    import jax
    was = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    yield
    jax.config.update("jax_enable_x64", was)
