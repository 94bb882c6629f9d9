"""The HLO verifier (xlaplug/hlo/verifier.py) and XLA's shape rules (shape_inference.py).

(a) every module of the StableHLO conformance suite verifies;
(b) HLO that jax/XLA produce for many ops (lowered and compiled) verifies, and corrupting a
    declared shape in it is caught;
(c) hand-written HLO with a wrong declared shape, for each family of ops, is rejected with a
    message naming the instruction, the inferred and declared shapes, at the right line.

jax is a test-only oracle: XLA itself verified everything jax hands us.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from suite_location import conformance_dir
from oracle import hlo_text, jax_shard_map, strip_stack_tables
from xlaplug.hlo import HloSyntaxError, HloVerifyError, parse_module
from xlaplug.hlo import shape_inference as si
from xlaplug.hlo.ir import Shape
from xlaplug.hlo.opcodes import ALL_OPCODES
from xlaplug.hlo.verifier import verify_instruction, verify_module, verify_module_all


def parse(text: str, name: str = "<test>"):
    try:
        return parse_module(text, name)
    except HloSyntaxError:
        # Parsers whose lexer reads "FileNames" as a computation name cannot read the
        # FileNames/FunctionNames/FileLocations/StackFrames tables `compile().as_text()`
        # prints; they carry only debug locations, so retry without them.
        return parse_module(strip_stack_tables(text), name)


def line_of(text: str, name: str) -> int:
    for k, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*(ROOT\s+)?%?{re.escape(name)}\s*=", line):
            return k
    raise AssertionError(f"no instruction {name}")


# ---- (a) conformance suite -----------------------------------------------------------------

# Every case of the suite verifies: its shards (tests/test_conformance_stablehlo.py) verify
# each case they run (xlaplug.runtime.conformance.run_case), so it is not parsed again here.


def test_conformance_corruptions_are_caught():
    """Corrupting declared shapes in conformance modules must be caught (the rules bite)."""
    files = sorted(conformance_dir().glob("*.hlo"))
    assert files, "the conformance suite's folder holds no .hlo files"
    picked = [p for p in files[::12]]
    checked, missed = _mutation_sweep([parse_module(p.read_text(), p.name) for p in picked])
    assert checked > 500
    assert not missed, "\n".join(missed[:20])


# ---- (b) jax programs ----------------------------------------------------------------------

def _programs():
    """name -> (function, make_args, x64)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    rs = np.random.RandomState(0)

    def arr(*shape, dtype=np.float32):
        return rs.standard_normal(shape).astype(dtype)

    def ints(lo, hi, shape, dtype=np.int32):
        return rs.randint(lo, hi, shape).astype(dtype)

    P = {}

    def mlp(params, x, y):
        h = x
        for w, b in params[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = params[-1]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ w + b) * y, axis=-1))

    P["mlp_grad"] = (jax.value_and_grad(mlp),
                     lambda: ([(arr(8, 16), arr(16)), (arr(16, 16), arr(16)), (arr(16, 4), arr(4))],
                              arr(5, 8), arr(5, 4)), False)
    P["mlp_bf16"] = (lambda x, w: jnp.tanh((x.astype(jnp.bfloat16) @ w.astype(jnp.bfloat16))
                                           .astype(jnp.float32)).sum(),
                     lambda: (arr(4, 8), arr(8, 3)), False)

    def conv(x, w):
        return lax.conv_general_dilated(x, w, window_strides=(2, 1), padding=((1, 2), (0, 1)),
                                        lhs_dilation=(1, 2), rhs_dilation=(2, 1),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def gconv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    P["conv_strides_dilations"] = (conv, lambda: (arr(2, 4, 9, 7), arr(6, 4, 3, 2)), False)
    # The weight gradient of a grouped convolution is a batch_group_count convolution.
    P["conv_groups_and_grad"] = (
        lambda x, w: (gconv(x, w), jax.grad(lambda a, b: gconv(a, b).sum(), argnums=(0, 1))(x, w)),
        lambda: (arr(2, 8, 8, 4), arr(3, 3, 2, 6)), False)
    P["conv_transpose_1d_grad"] = (
        lambda x, w, y, v: (
            lax.conv_transpose(y, v, (2, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")),
            jax.grad(lambda a, b: (lax.conv_general_dilated(a, b, (2,), [(1, 1)],
                                                            rhs_dilation=(2,)) ** 2).sum(),
                     argnums=(0, 1))(x, w)),
        lambda: (arr(3, 4, 17), arr(5, 4, 3), arr(1, 5, 5, 3), arr(3, 3, 3, 2)), False)

    def gather_scatter(x, idx, v):
        return (x[idx], x.at[idx].add(v), jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1),
                x.at[idx, 1:3].set(0.0), x.at[idx].max(v, mode="drop"), x[idx[:, None], idx[None, :2]])

    P["gather_scatter"] = (gather_scatter, lambda: (arr(6, 5), np.array([0, 3, 3, 5], np.int32),
                                                    arr(4, 5)), False)
    P["vmap_gather_scatter"] = (jax.vmap(lambda x, i, v: (x[i], x.at[i].add(v), x.at[i].mul(v))),
                                lambda: (arr(3, 6, 5), np.array([[0, 1], [2, 3], [4, 5]], np.int32),
                                         arr(3, 2, 5)), False)
    P["dynamic_slices"] = (lambda x, i: (lax.dynamic_slice(x, (i, i), (2, 3)),
                                         lax.dynamic_update_slice(x, jnp.ones((2, 2), x.dtype), (i, i)),
                                         lax.dynamic_index_in_dim(x, i, 1)),
                           lambda: (arr(6, 5), np.int32(2)), False)

    def loop(x):
        def body(c):
            i, v = c
            return i + 1, jnp.sin(v) * 1.5
        return lax.while_loop(lambda c: c[0] < 10, body, (0, x))

    P["while_fori_scan"] = (lambda x: (loop(x), lax.fori_loop(0, 5, lambda i, v: v * 2 + i, x),
                                       lax.scan(lambda c, y: (c + y, c * y), x[0], x)),
                            lambda: (arr(4, 3),), False)
    P["cond_switch"] = (lambda p, i, x: (lax.cond(p > 0, jnp.cos, lambda v: v * 2, x),
                                         lax.switch(i, [jnp.sin, jnp.cos, lambda v: -v], x)),
                        lambda: (np.float32(1), np.int32(1), arr(3)), False)
    P["sort_topk"] = (lambda x, y: (jnp.sort(x, axis=0), jnp.argsort(x), lax.sort((x, y), num_keys=1),
                                    lax.top_k(x, 3), jnp.median(x)),
                      lambda: (arr(5, 6), arr(5, 6)), False)
    P["fft"] = (lambda x, c: (jnp.fft.fft(c), jnp.fft.ifft(c), jnp.fft.rfft(x), jnp.fft.irfft(c),
                              jnp.fft.fft2(c), jnp.fft.rfftn(x), jnp.fft.irfftn(c, s=(4, 8))),
                lambda: (arr(4, 8), (arr(4, 5) + 1j * arr(4, 5)).astype(np.complex64)), False)
    P["linalg"] = (lambda a, b: (jnp.linalg.cholesky(a @ a.T + 4 * jnp.eye(4)),
                                 lax.linalg.triangular_solve(a, b, left_side=True, lower=True),
                                 lax.linalg.triangular_solve(a, b.T, left_side=False, lower=False,
                                                             transpose_a=True),
                                 jnp.linalg.inv(a), jnp.linalg.solve(a, b), jnp.linalg.qr(a),
                                 jnp.linalg.eigh(a + a.T), jnp.linalg.det(a)),
                   lambda: (arr(4, 4), arr(4, 2)), False)
    P["reduce_window"] = (lambda x: (lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1),
                                                       (1, 2, 2, 1), "VALID"),
                                     lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1),
                                                       "SAME"),
                                     jnp.cumsum(x, axis=1), lax.cummax(x, axis=1)),
                          lambda: (arr(2, 6, 6, 3),), False)

    def maxpool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME").sum()

    P["select_and_scatter"] = (jax.grad(maxpool), lambda: (arr(2, 7, 7, 3),), False)
    P["bitcast_convert"] = (lambda x, b: (lax.bitcast_convert_type(x, jnp.uint32),
                                          lax.bitcast_convert_type(x, jnp.uint8),
                                          lax.bitcast_convert_type(b, jnp.float32),
                                          lax.bitcast_convert_type(x, jnp.bfloat16)),
                            lambda: (arr(3, 4), ints(0, 255, (3, 4, 4), np.uint8)), False)
    P["complex"] = (lambda a, b: (lax.complex(a, b) * lax.complex(b, a), jnp.abs(lax.complex(a, b)),
                                  jnp.real(jnp.exp(lax.complex(a, b))),
                                  jnp.imag(jnp.conj(lax.complex(a, b))), jnp.angle(lax.complex(a, b)),
                                  jnp.sqrt(lax.complex(a, b)) @ lax.complex(b, a).T),
                    lambda: (arr(3, 3), arr(3, 3)), False)
    P["dot_general"] = (lambda a, b, c, i, j: (
        jnp.einsum("bij,bjk->bik", a, b), jnp.einsum("bij,bkj->bki", a, c),
        lax.dot_general(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), (((2,), (1,)), ((0,), (0,))),
                        preferred_element_type=jnp.float32),
        jnp.einsum("ij,kl->ijkl", a[0], c[0]), jnp.dot(a[0, 0], b[0, :, 0]),
        lax.dot(i, j, preferred_element_type=jnp.int32)),
        lambda: (arr(2, 3, 4), arr(2, 4, 5), arr(2, 6, 4), ints(-5, 5, (3, 4), np.int8),
                 ints(-5, 5, (4, 2), np.int8)), False)
    P["rng"] = (lambda key: (lax.rng_bit_generator(key, (4, 5), dtype=jnp.uint32),
                             lax.rng_bit_generator(key, (3,), dtype=jnp.uint64,
                                                   algorithm=lax.RandomAlgorithm.RNG_PHILOX),
                             jax.random.normal(jax.random.PRNGKey(1), (3, 4)),
                             jax.random.randint(jax.random.PRNGKey(2), (2, 2), 0, 10)),
                lambda: (np.zeros((4,), np.uint32),), True)
    P["elementwise"] = (lambda x, i, u: (
        jnp.clip(x, -0.5, 0.5), lax.clamp(np.float32(-1), x, np.float32(1)), jnp.sign(x),
        jnp.floor(x), jnp.round(x), lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), jnp.ceil(x),
        lax.erf(x), lax.erf_inv(x * 0.1), jnp.expm1(x), jnp.log1p(jnp.abs(x)), jnp.isfinite(x),
        jnp.arctan2(x, x + 1), lax.reduce_precision(x, 5, 10), lax.population_count(i), lax.clz(i),
        i << 2, i >> 1, lax.shift_right_logical(u, np.uint32(3)), ~i, i & 5, i | 3, i ^ 7,
        jnp.remainder(x, 0.7), x ** 3, jnp.power(x, x), lax.select(x > 0, x, -x),
        jnp.nextafter(x, x + 1), jnp.tan(x), lax.cbrt(x), lax.rsqrt(jnp.abs(x) + 1),
        lax.logistic(x), jnp.minimum(i, 3), x.astype(jnp.int8), i.astype(jnp.float16),
        -i, jnp.abs(i), jnp.logical_not(x > 0), x.astype(jnp.bfloat16)),
        lambda: (arr(3, 4), ints(-100, 100, (3, 4)), ints(0, 100, (3, 4), np.uint32)), False)
    P["shape_ops"] = (lambda x, y: (
        jnp.pad(x, ((1, 2), (0, 3))), lax.pad(x, np.float32(0), ((1, -1, 1), (2, 0, 2))),
        jnp.concatenate([x, y, x], axis=0), x.T, x.reshape(4, 3),
        jnp.broadcast_to(x[:, None, :], (3, 2, 4)), jnp.flip(x, 0), x[::2, 1:3],
        jnp.arange(12, dtype=jnp.float32).reshape(3, 4) + x, jnp.argmax(x, axis=1),
        jnp.max(x, axis=0), jnp.prod(x), jnp.any(x > 0), jnp.tile(x, (2, 1)),
        jnp.repeat(x, 2, axis=1), jnp.roll(x, 1, 1), jnp.triu(x), jnp.diag(x[:3, :3]),
        jax.nn.softmax(x), jax.scipy.special.logsumexp(x, axis=0), jax.vmap(jnp.dot)(x, x)),
        lambda: (arr(3, 4), arr(2, 4)), False)
    P["x64"] = (lambda a, b, c: (a * 2.0, jnp.sum(a), b // 3, b % 3, jnp.cumsum(b),
                                 lax.bitcast_convert_type(a, jnp.int32), jnp.fft.rfft(a),
                                 c.astype(jnp.float16) * 2, (c > 3).astype(jnp.int8)),
                lambda: (np.arange(6, dtype=np.float64).reshape(2, 3), np.arange(6, dtype=np.int64),
                         np.array([1, 5, 9], np.uint8)), True)

    def collectives(a):
        return (lax.psum(a, "x"), lax.all_gather(a, "x", axis=0, tiled=True),
                lax.ppermute(a, "x", [(0, 0)]), lax.all_to_all(a, "x", 0, 1, tiled=True),
                lax.psum_scatter(a, "x", scatter_dimension=0, tiled=True), lax.axis_index("x"))

    shard_map = jax_shard_map()
    from jax.sharding import Mesh, PartitionSpec as PS
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    specs = dict(mesh=mesh, in_specs=PS("x"),
                 out_specs=(PS(), PS(), PS("x"), PS("x"), PS("x"), PS()))
    try:
        sharded = shard_map(collectives, check_vma=False, **specs)
    except TypeError:  # older jax
        sharded = shard_map(collectives, check_rep=False, **specs)
    P["collectives"] = (sharded, lambda: (arr(4, 4),), False)
    return P


@pytest.fixture(scope="module")
def jax_texts():
    """name -> {"lowered": text, "compiled": text}, each program lowered and compiled once."""
    jax = pytest.importorskip("jax")
    out = {}
    for name, (fn, make_args, x64) in _programs().items():
        with jax.enable_x64(x64):
            lowered = jax.jit(fn).lower(*make_args())
            out[name] = {kind: hlo_text(lowered, kind) for kind in ("lowered", "compiled")}
    return out


JAX_PROGRAMS = ["mlp_grad", "mlp_bf16", "conv_strides_dilations", "conv_groups_and_grad",
                "conv_transpose_1d_grad", "gather_scatter", "vmap_gather_scatter", "dynamic_slices",
                "while_fori_scan", "cond_switch", "sort_topk", "fft", "linalg", "reduce_window",
                "select_and_scatter", "bitcast_convert", "complex", "dot_general", "rng",
                "elementwise", "shape_ops", "x64", "collectives"]


@pytest.mark.parametrize("kind", ["lowered", "compiled"])
@pytest.mark.parametrize("name", JAX_PROGRAMS)
def test_jax_program_verifies(jax_texts, name, kind):
    module = parse(jax_texts[name][kind], f"{name}.{kind}")
    errors = verify_module_all(module)
    assert not errors, "\n".join(f"{e.line}: {e.message}" for e in errors)


def test_jax_programs_cover_the_ops(jax_texts):
    seen = set()
    for texts in jax_texts.values():
        for text in texts.values():
            for c in parse(text).computations:
                seen.update(i.opcode for i in c.instructions)
    want = {"dot", "convolution", "gather", "scatter", "while", "conditional", "sort", "fft",
            "reduce-window", "select-and-scatter",
            "bitcast-convert", "complex", "rng-bit-generator", "reduce", "topk", "fusion",
            "dynamic-slice", "dynamic-update-slice", "pad", "concatenate", "transpose", "reshape",
            "broadcast", "iota", "clamp", "select", "compare", "reduce-precision", "popcnt",
            "count-leading-zeros", "shift-left", "shift-right-logical", "shift-right-arithmetic",
            "real", "imag", "is-finite", "all-reduce", "all-gather", "reduce-scatter",
            "collective-permute", "partition-id", "call", "custom-call", "bitcast", "copy"}
    assert not want - seen, sorted(want - seen)


def _corrupt(shape: Shape, how: str) -> Shape | None:
    """`shape` with its first array leaf changed: dimension 0 grown by one ("dim"), or another
    element type ("type"); None when there is nothing to change."""
    if shape.is_tuple:
        for k, sub in enumerate(shape.tuple_shapes):
            new = _corrupt(sub, how)
            if new is not None:
                subs = list(shape.tuple_shapes)
                subs[k] = new
                return Shape.tuple_of(subs)
        return None
    if shape.is_token:
        return None
    if how == "dim":
        if not shape.rank or shape.dims[0] < 0:
            return None
        return Shape(shape.element_type, (shape.dims[0] + 1,) + shape.dims[1:], shape.dynamic)
    t = "s32" if shape.element_type != "s32" else "f32"
    return Shape(t, shape.dims, shape.dynamic)


def _mutation_sweep(modules):
    """Corrupt each checked instruction's declared shape (a dimension, then the element type)
    and count the corruptions the verifier misses.  Opcodes whose result (or that part of
    it) is taken from the declaration are skipped."""
    trusted = set(si.TRUST_DECLARED) | {"iota", "rng", "recv", "infeed"}
    type_from_decl = {"convert", "bitcast-convert", "stochastic-convert", "dot", "convolution"}
    checked, missed = 0, []
    for m in modules:
        for c in m.computations:
            for ins in c.instructions:
                if ins.opcode in trusted:
                    continue
                orig = ins.shape
                muts = []
                if ins.opcode != "broadcast" or 0 in ins.attrs.get("dimensions", ()):
                    muts.append(_corrupt(orig, "dim"))
                if ins.opcode not in type_from_decl:
                    muts.append(_corrupt(orig, "type"))
                for new in muts:
                    if new is None:
                        continue
                    ins.shape = new
                    try:
                        if verify_instruction(ins) is None:
                            missed.append(f"{m.name}: {ins.name} ({ins.opcode}) {orig} -> {new}")
                        checked += 1
                    finally:
                        ins.shape = orig
    return checked, missed


def test_jax_corruptions_are_caught(jax_texts):
    modules = [parse(t[k]) for t in jax_texts.values() for k in ("lowered", "compiled")]
    checked, missed = _mutation_sweep(modules)
    assert checked > 2000
    assert not missed, "\n".join(missed[:20])


# ---- (c) hand-written HLO: wrong declared shapes ---------------------------------------------

def expect_error(text: str, name: str, *fragments: str) -> HloVerifyError:
    module = parse_module(text, "case.hlo")
    with pytest.raises(HloVerifyError) as info:
        verify_module(module)
    err = info.value
    assert f"instruction '{name}'" in err.message, err.message
    for f in fragments:
        assert f in err.message, f"{f!r} not in {err.message!r}"
    assert err.line == line_of(text, name), (err.line, err.message)
    assert err.column >= 1 and err.file == "case.hlo"
    assert err.headline().startswith(f"case.hlo:{err.line}:")
    return err


def mismatch(inferred: str, declared: str) -> str:
    return f"inferred shape {inferred} but declared {declared}"


ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

NEGATIVE = {
    "elementwise": ("""HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  q = f32[2,3] parameter(1)
  ROOT bad = f32[3,2]{1,0} add(p, q)
}
""", "bad", mismatch("f32[2,3]", "f32[3,2]"), "(add)"),
    "compare_type": ("""HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  ROOT bad = f32[4] compare(p, p), direction=LT
}
""", "bad", mismatch("pred[4]", "f32[4]")),
    "unary_complex_abs": ("""HloModule m
ENTRY e {
  p = c64[4] parameter(0)
  ROOT bad = c64[4] abs(p)
}
""", "bad", mismatch("f32[4]", "c64[4]")),
    "dot": ("""HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[5,3,4] parameter(1)
  x = f32[5,2,3] broadcast(a), dimensions={1,2}
  ROOT bad = f32[5,2,3] dot(x, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
""", "bad", mismatch("f32[5,2,4]", "f32[5,2,3]")),
    "conv": ("""HloModule m
ENTRY e {
  x = f32[1,8,8,3] parameter(0)
  w = f32[3,3,3,16] parameter(1)
  ROOT bad = f32[1,8,8,16] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
""", "bad", mismatch("f32[1,4,4,16]", "f32[1,8,8,16]")),
    "conv_groups": ("""HloModule m
ENTRY e {
  x = f32[2,8,5,5] parameter(0)
  w = f32[6,4,3,3] parameter(1)
  ROOT bad = f32[2,4,3,3] convolution(x, w), window={size=3x3}, dim_labels=bf01_oi01->bf01, feature_group_count=2
}
""", "bad", mismatch("f32[2,6,3,3]", "f32[2,4,3,3]")),
    "reduce": (f"""HloModule m
{ADD}
ENTRY e {{
  p = f32[4,5] parameter(0)
  z = f32[] constant(0)
  ROOT bad = f32[5] reduce(p, z), dimensions={{1}}, to_apply=add
}}
""", "bad", mismatch("f32[4]", "f32[5]")),
    "reduce_window": (f"""HloModule m
{ADD}
ENTRY e {{
  p = f32[8,8] parameter(0)
  z = f32[] constant(0)
  ROOT bad = f32[4,4] reduce-window(p, z), window={{size=3x3 stride=2x2}}, to_apply=add
}}
""", "bad", mismatch("f32[3,3]", "f32[4,4]")),
    "gather": ("""HloModule m
ENTRY e {
  p = f32[6,5] parameter(0)
  i = s32[4,1] parameter(1)
  ROOT bad = f32[4,6] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
}
""", "bad", mismatch("f32[4,5]", "f32[4,6]")),
    "scatter": (f"""HloModule m
{ADD}
ENTRY e {{
  p = f32[6,5] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4,5] parameter(2)
  ROOT bad = f32[4,5] scatter(p, i, u), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add
}}
""", "bad", mismatch("f32[6,5]", "f32[4,5]")),
    "slice": ("""HloModule m
ENTRY e {
  p = f32[10,6] parameter(0)
  ROOT bad = f32[3,6] slice(p), slice={[1:8:2], [0:6]}
}
""", "bad", mismatch("f32[4,6]", "f32[3,6]")),
    "broadcast": ("""HloModule m
ENTRY e {
  p = f32[3] parameter(0)
  ROOT bad = f32[2,4] broadcast(p), dimensions={1}
}
""", "bad", mismatch("f32[2,3]", "f32[2,4]")),
    "reshape_count": ("""HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  ROOT bad = f32[4,2] reshape(p)
}
""", "bad", "f32[2,3]", "f32[4,2]", "element"),
    "reshape_type": ("""HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  ROOT bad = s32[3,2] reshape(p)
}
""", "bad", mismatch("f32[3,2]", "s32[3,2]")),
    "transpose": ("""HloModule m
ENTRY e {
  p = f32[2,3,4] parameter(0)
  ROOT bad = f32[4,3,2] transpose(p), dimensions={1,2,0}
}
""", "bad", mismatch("f32[3,4,2]", "f32[4,3,2]")),
    "concatenate": ("""HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  q = f32[5,3] parameter(1)
  ROOT bad = f32[8,3] concatenate(p, q, p), dimensions={0}
}
""", "bad", mismatch("f32[9,3]", "f32[8,3]")),
    "pad": ("""HloModule m
ENTRY e {
  p = f32[4,3] parameter(0)
  z = f32[] constant(0)
  ROOT bad = f32[8,4] pad(p, z), padding=1_2_1x0_-1
}
""", "bad", mismatch("f32[10,2]", "f32[8,4]")),
    "while_declared": ("""HloModule m
cond {
  c = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  b = (s32[], f32[2]) parameter(0)
  i0 = s32[] get-tuple-element(b), index=0
  v0 = f32[2] get-tuple-element(b), index=1
  ROOT t = (s32[], f32[2]) tuple(i0, v0)
}
ENTRY e {
  i = s32[] constant(0)
  v = f32[2] parameter(0)
  init = (s32[], f32[2]) tuple(i, v)
  ROOT bad = (s32[], f32[3]) while(init), condition=cond, body=body
}
""", "bad", mismatch("(s32[], f32[2])", "(s32[], f32[3])")),
    "while_signature": ("""HloModule m
cond {
  c = (s32[], f32[2]) parameter(0)
  ROOT k = pred[] constant(false)
}
body {
  b = (s32[], f32[2]) parameter(0)
  i0 = s32[] get-tuple-element(b), index=0
  v0 = f32[2] get-tuple-element(b), index=1
  z = f32[] constant(0)
  w = f32[3] pad(v0, z), padding=0_1
  ROOT t = (s32[], f32[3]) tuple(i0, w)
}
ENTRY e {
  i = s32[] constant(0)
  v = f32[2] parameter(0)
  init = (s32[], f32[2]) tuple(i, v)
  ROOT bad = (s32[], f32[2]) while(init), condition=cond, body=body
}
""", "bad", "body", "(s32[], f32[3])", "(s32[], f32[2])"),
    "conditional_branches": ("""HloModule m
b0 {
  x = f32[2] parameter(0)
  ROOT y = f32[2] negate(x)
}
b1 {
  x = f32[2] parameter(0)
  ROOT y = f32[1] slice(x), slice={[0:1]}
}
ENTRY e {
  k = s32[] parameter(0)
  v = f32[2] parameter(1)
  ROOT bad = f32[2] conditional(k, v, v), branch_computations={b0, b1}
}
""", "bad", "branch 1", "f32[2]", "f32[1]"),
    "conditional_declared": ("""HloModule m
t {
  x = f32[2] parameter(0)
  ROOT y = f32[2] negate(x)
}
f {
  x = f32[2] parameter(0)
  ROOT y = f32[2] abs(x)
}
ENTRY e {
  p = pred[] parameter(0)
  v = f32[2] parameter(1)
  ROOT bad = f32[3] conditional(p, v, v), true_computation=t, false_computation=f
}
""", "bad", mismatch("f32[2]", "f32[3]")),
    "operand_count": ("""HloModule m
ENTRY e {
  p = f32[2] parameter(0)
  ROOT bad = f32[2] add(p, p, p)
}
""", "bad", "add", "2 operands", "has 3"),
    "gte_index": ("""HloModule m
ENTRY e {
  p = f32[2] parameter(0)
  t = (f32[2], f32[2]) tuple(p, p)
  ROOT bad = f32[2] get-tuple-element(t), index=2
}
""", "bad", "index 2", "(f32[2], f32[2])"),
    "dynamic_slice": ("""HloModule m
ENTRY e {
  p = f32[6,5] parameter(0)
  i = s32[] parameter(1)
  ROOT bad = f32[2,2] dynamic-slice(p, i, i), dynamic_slice_sizes={2,3}
}
""", "bad", mismatch("f32[2,3]", "f32[2,2]")),
    "sort": ("""HloModule m
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY e {
  k = f32[5] parameter(0)
  v = s32[5] parameter(1)
  ROOT bad = (f32[5], f32[5]) sort(k, v), dimensions={0}, to_apply=less
}
""", "bad", mismatch("(f32[5], s32[5])", "(f32[5], f32[5])")),
    "fft": ("""HloModule m
ENTRY e {
  p = f32[4,8] parameter(0)
  ROOT bad = c64[4,8] fft(p), fft_type=RFFT, fft_length={8}
}
""", "bad", mismatch("c64[4,5]", "c64[4,8]")),
    "bitcast_convert": ("""HloModule m
ENTRY e {
  p = f32[3] parameter(0)
  ROOT bad = u8[3] bitcast-convert(p)
}
""", "bad", mismatch("u8[3,4]", "u8[3]")),
    "call": ("""HloModule m
f {
  x = f32[2] parameter(0)
  ROOT y = f32[2] negate(x)
}
ENTRY e {
  p = f32[2] parameter(0)
  ROOT bad = f32[3] call(p), to_apply=f
}
""", "bad", mismatch("f32[2]", "f32[3]")),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_wrong_declared_shape_is_rejected(case):
    text, name, *fragments = NEGATIVE[case]
    expect_error(text, name, *fragments)


INVALID_OPERANDS = {
    # (operand shapes, instruction text, fragment of the message)
    "shift_on_pred": ("pred[4]", "pred[4] shift-left(p, p)", "arithmetic"),
    "popcnt_on_float": ("f32[4]", "f32[4] popcnt(p)", "integral"),
    "and_on_float": ("f32[4]", "f32[4] and(p, p)", "pred or integral"),
    "not_on_float": ("f32[4]", "f32[4] not(p)", "pred or integral"),
    "clz_on_float": ("f32[4]", "f32[4] count-leading-zeros(p)", "integral"),
    "floor_on_int": ("s32[4]", "s32[4] floor(p)", "floating-point"),
    "is_finite_on_int": ("s32[4]", "pred[4] is-finite(p)", "floating-point"),
    "abs_unsigned": ("u32[4]", "u32[4] abs(p)", "signed"),
    "complex_of_ints": ("s32[4]", "c64[4] complex(p, p)", "floating-point"),
    "add_rank_mismatch": ("f32[4]", "f32[4,4] add(p, q)", "same rank"),
    "dot_contracting": ("f32[4]", "f32[] dot(p, r), lhs_contracting_dims={0}, "
                                  "rhs_contracting_dims={1}", "contracting dimensions differ"),
    "dot_narrowing": ("s32[4]", "s8[] dot(q, q), lhs_contracting_dims={0}, rhs_contracting_dims={0}",
                      "narrower"),
    "select_pred_type": ("f32[4]", "f32[4] select(p, p, p)", "pred"),
    "slice_limit": ("f32[4]", "f32[3] slice(p), slice={[0:5]}", "exceeds"),
    "transpose_perm": ("f32[4]", "f32[4] transpose(p), dimensions={1}", "permutation"),
    "reduce_precision_bits": ("f32[4]", "f32[4] reduce-precision(p), exponent_bits=0, "
                                        "mantissa_bits=3", "exponent_bits"),
    "bitcast_size": ("f32[4]", "f32[2] bitcast(p)", "byte size"),
    "bitcast_convert_complex": ("f32[4]", "c64[4] bitcast-convert(p)", "complex"),
    "cholesky_not_square": ("f32[4]", "f32[4,2] cholesky(r), lower=true", "square"),
    "topk_k": ("f32[4]", "(f32[5], s32[5]) topk(p), k=5, largest=true", "out of range"),
    "iota_dimension": ("f32[4]", "f32[4] iota(), iota_dimension=1", "iota_dimension"),
    "conditional_index": ("f32[4]", "f32[4] conditional(p, p, p), branch_computations={id, id}",
                          "must be a scalar"),
    "missing_attribute": ("f32[4]", "f32[4] reverse(p)", "missing attribute 'dimensions'"),
}


@pytest.mark.parametrize("case", sorted(INVALID_OPERANDS))
def test_invalid_operands_are_rejected(case):
    pshape, body, fragment = INVALID_OPERANDS[case]
    text = f"""HloModule m
id {{
  x = f32[4] parameter(0)
  ROOT y = f32[4] copy(x)
}}
ENTRY e {{
  p = {pshape} parameter(0)
  q = {pshape.replace('[4]', '[4,4]')} parameter(1)
  r = f32[4,2] parameter(2)
  ROOT bad = {body}
}}
"""
    expect_error(text, "bad", fragment)


# ---- positive hand-written cases: the opcodes jax does not produce here -----------------------

ZOO = """HloModule zoo, entry_computation_layout={(f32[4,6]{1,0}, s32[], f32[6], token[], u64[2]{0}, f64[4,3]{1,0}, f64[4,6]{1,0}, u64[4,6]{1,0}, f32[4,4]{1,0})->f32[4,6]{1,0}}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

addmul {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  x = f32[] add(a, c)
  y = s32[] multiply(b, d)
  ROOT t = (f32[], s32[]) tuple(x, y)
}

mapped {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

wrapped {
  w = f32[4,6] parameter(0)
  ROOT n = f32[4,6] negate(w)
}

fused {
  f0 = f32[4,6] parameter(0)
  f1 = f32[6] parameter(1)
  fb = f32[4,6] broadcast(f1), dimensions={1}
  ROOT fm = f32[4,6] multiply(f0, fb)
}

ENTRY main {
  p = f32[4,6] parameter(0)
  k = s32[] parameter(1)
  v = f32[6] parameter(2)
  tok = token[] parameter(3)
  key = u64[2] parameter(4)
  d64 = f64[4,3] parameter(5)
  e64 = f64[4,6] parameter(6)
  bits = u64[4,6] parameter(7)
  sq = f32[4,4] parameter(8)
  z = f32[] constant(0)
  iz = s32[] constant(0)
  ar = f32[4,6] all-reduce(p), replica_groups={{0,1},{2,3}}, to_apply=add
  ag = f32[8,6] all-gather(p), replica_groups={{0,1},{2,3}}, dimensions={0}
  agt = (f32[8,6], f32[12]) all-gather(p, v), replica_groups=[2,2]<=[4], dimensions={0}, channel_id=1, use_global_device_ids=true
  rs = f32[2,6] reduce-scatter(p), replica_groups={{0,1},{2,3}}, dimensions={0}, to_apply=add
  a2a = f32[4,6] all-to-all(p), replica_groups={{0,1}}, dimensions={0}
  a2at = (f32[4,6], f32[4,6]) all-to-all(p, p), replica_groups={{0,1}}
  cp = f32[4,6] collective-permute(p), source_target_pairs={{0,1},{1,0}}
  cb = f32[4,6] collective-broadcast(p), replica_groups={{0,1}}
  ars = f32[4,6] all-reduce-start(p), replica_groups={}, to_apply=add
  ard = f32[4,6] all-reduce-done(ars)
  ags = (f32[4,6], f32[8,6]) all-gather-start(p), replica_groups={{0,1}}, dimensions={0}
  agd = f32[8,6] all-gather-done(ags)
  cps = (f32[4,6], f32[4,6], u32[], u32[]) collective-permute-start(p), source_target_pairs={{0,1}}
  cpd = f32[4,6] collective-permute-done(cps)
  rid = u32[] replica-id()
  pid = u32[] partition-id()
  ast = ((f32[4,6]), f32[4,6], s32[]) async-start(p), calls=wrapped
  aup = ((f32[4,6]), f32[4,6], s32[]) async-update(ast), calls=wrapped
  adn = f32[4,6] async-done(aup), calls=wrapped
  cst = (f32[4,6], f32[4,6], u32[]) copy-start(p)
  cdn = f32[4,6] copy-done(cst)
  snd = (f32[6], u32[], token[]) send(v, tok), channel_id=2
  sdd = token[] send-done(snd), channel_id=2
  rcv = (f32[6], u32[], token[]) recv(tok), channel_id=3
  rcd = (f32[6], token[]) recv-done(rcv), channel_id=3
  inf = ((f32[3], s32[]), token[]) infeed(tok)
  out = token[] outfeed(v, tok), outfeed_shape=f32[6]{0}
  aft = token[] after-all(tok, sdd, out)
  aft0 = token[] after-all()
  dep = f32[4,6] add-dependency(p, aft)
  pk = (f32[4,6], s32[]) tuple(p, k)
  ob = (f32[4,6], s32[]) opt-barrier(pk)
  gds = s32[] get-dimension-size(p), dimensions={1}
  sds = f32[<=4,6] set-dimension-size(p, gds), dimensions={0}
  sdsa = f32[<=4,6] abs(sds)
  sdsb = f32[4,6] negate(sdsa)
  lo = f32[] constant(-1)
  hi = f32[] constant(1)
  rng = f32[2,3] rng(lo, hi), distribution=rng_uniform
  rngn = f32[5] rng(z, hi), distribution=rng_normal
  st = u64[2] rng-get-and-update-state()
  rbg = (u64[2], u32[3,4]) rng-bit-generator(key), algorithm=rng_default
  mp = f32[4,6] map(p, p), dimensions={0,1}, to_apply=mapped
  iota = s32[4,6] iota(), iota_dimension=1
  red2 = (f32[4], s32[4]) reduce(p, iota, z, iz), dimensions={1}, to_apply=addmul
  rw2 = (f32[2,3], s32[2,3]) reduce-window(p, iota, z, iz), window={size=2x2 stride=2x2}, to_apply=addmul
  fus = f32[4,6] fusion(p, v), kind=kLoop, calls=fused
  bnt = (f32[4,6], f32[6], f32[6]) batch-norm-training(p, v, v), epsilon=0.001, feature_index=1
  bni = f32[4,6] batch-norm-inference(p, v, v, v, v), epsilon=0.001, feature_index=1
  bng = (f32[4,6], f32[6], f32[6]) batch-norm-grad(p, v, v, v, p), epsilon=0.001, feature_index=1
  cl = f32[4,6] clamp(lo, p, hi)
  t = pred[] constant(true)
  sel = f32[4,6] select(t, p, p)
  sc = c64[4,6] complex(p, p)
  rl = f32[4,6] real(sc)
  sl = f32[2,2] slice(p), slice={[0:2], [0:2]}
  dus = f32[4,6] dynamic-update-slice(p, sl, k, k)
  n24 = s32[] constant(24)
  dr = f32[24] dynamic-reshape(p, n24)
  cc = (f32[2], s32[]) custom-call(p), custom_call_target="foo"
  bc = s32[4,6] bitcast(p)
  bcv = f32[4,3,2] bitcast-convert(d64)
  bcv2 = u16[4,6,2] bitcast-convert(p)
  bcv3 = f32[4,6] bitcast-convert(bcv2)
  stc = f32[4,6] stochastic-convert(e64, bits)
  dt = f32[4,4] dot(p, p), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  fft = c64[4,6] fft(sc), fft_type=IFFT, fft_length={6}
  irfft = f32[4,10] fft(sc), fft_type=IRFFT, fft_length={10}
  ts = f32[4,6] triangular-solve(sq, p), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
  cho = f32[4,4] cholesky(sq), lower=true
  ROOT r = f32[4,6] add(p, cl)
}
"""


def test_zoo_verifies():
    module = parse_module(ZOO, "zoo.hlo")
    errors = verify_module_all(module)
    assert not errors, "\n".join(f"{e.line}: {e.message}" for e in errors)
    seen = {i.opcode for c in module.computations for i in c.instructions}
    for op in ("all-gather", "reduce-scatter", "all-to-all", "collective-permute-start",
               "async-start", "async-done", "copy-start", "send", "recv-done", "infeed", "outfeed",
               "after-all", "add-dependency", "opt-barrier", "set-dimension-size", "rng",
               "rng-get-and-update-state", "map", "batch-norm-grad", "stochastic-convert",
               "dynamic-reshape", "collective-broadcast"):
        assert op in seen, op


def test_zoo_corruptions_are_caught():
    module = parse_module(ZOO, "zoo.hlo")
    checked, missed = _mutation_sweep([module])
    assert checked > 80
    assert not missed, "\n".join(missed)


# ---- structure, options, the rule table ---------------------------------------------------

def test_verify_module_all_collects_every_problem_in_order():
    text = """HloModule m
ENTRY e {
  p = f32[2,3] parameter(0)
  a = f32[2,2] negate(p)
  b = f32[2,3] add(p, p)
  c = s32[2,3] add(p, p)
  ROOT d = f32[2,3] multiply(p, p, p)
}
"""
    errors = verify_module_all(parse_module(text))
    assert [e.line for e in errors] == [line_of(text, n) for n in ("a", "c", "d")]
    assert "inferred shape f32[2,3] but declared f32[2,2]" in errors[0].message
    assert "inferred shape f32[2,3] but declared s32[2,3]" in errors[1].message
    assert "multiply expects 2 operands, but has 3" in errors[2].message
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_module(text))
    assert info.value.line == errors[0].line


def test_structure_checks():
    text = """HloModule m
f {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  ROOT s = f32[2] add(x, y)
}
ENTRY e {
  p = f32[2] parameter(0)
  ROOT c = f32[2] call(p), to_apply=f
}
"""
    err = expect_error(text, "c", "takes 2 parameters", "1 operands")
    module = parse_module(text)
    # a parameter number out of range, a missing ROOT, no entry (IR built by hand)
    f = module.computation("f")
    f.instructions[1].parameter_number = 5
    f.root = None
    module.entry = None
    msgs = [e.message for e in verify_module_all(module)]
    assert any("no entry computation" in m for m in msgs)
    assert any("has number 5, out of range" in m for m in msgs)
    assert any("has no ROOT" in m for m in msgs)
    assert err.line == 9


def test_entry_computation_layout_is_checked():
    text = """HloModule m, entry_computation_layout={(f32[2]{0})->f32[3]{0}}
ENTRY e {
  ROOT p = f32[2]{0} parameter(0)
}
"""
    errors = verify_module_all(parse_module(text))
    assert len(errors) == 1 and "entry_computation_layout says f32[3]" in errors[0].message


def test_mixed_precision_option():
    text = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  q = bf16[4] parameter(1)
  ROOT a = f32[4] add(p, q)
}
"""
    expect_error(text, "a", "mixed precision")
    verify_module(parse_module(text), allow_mixed_precision=True)


def test_bounded_and_unbounded_dynamic_dimensions():
    text = """HloModule m
ENTRY e {
  p = f32[<=4,3] parameter(0)
  q = f32[?,3] parameter(1)
  a = f32[4,3] negate(p)
  b = f32[<=4,3] add(p, p)
  c = f32[?,3] abs(q)
  d = f32[?,6] concatenate(q, q), dimensions={1}
  ROOT e = f32[<=4,3] add(p, q)
}
"""
    verify_module(parse_module(text))
    with pytest.raises(HloVerifyError, match="unbounded"):
        verify_module(parse_module(text), allow_unbounded_dynamism=False)
    bad = text.replace("d = f32[?,6]", "d = f32[?,7]")
    expect_error(bad, "d", mismatch("f32[?,6]", "f32[?,7]"))


def test_every_opcode_has_a_rule_and_an_operand_count():
    assert set(si.RULES) == set(ALL_OPCODES)
    variadic = {"tuple", "after-all", "call", "fusion", "custom-call", "async-start",
                "dot", "collective-permute", "collective-permute-start", "scan", "map"}
    for op in ALL_OPCODES:
        assert (op in si.EXACT_OPERANDS or op in si.MIN_OPERANDS or op in variadic), op
    assert si.TRUST_DECLARED <= set(ALL_OPCODES)


def test_rule_decorator_rejects_duplicates_and_unknown_opcodes():
    with pytest.raises(ValueError):
        si.rule("add")(lambda ins: ins.shape)
    with pytest.raises(ValueError):
        si.rule("no-such-op")(lambda ins: ins.shape)
