"""Small regions (passes/small_regions.py, backends/cpu/region_code.py).

Runs of the entry's small-array instructions become one fusion each, compiled into one numba
function.  jax gives the expected values; a region run compiled must give the bits the
interpreter gives with the pass off (elementwise ops by the same SCALAR_OPS templates,
sums over any dimensions in numpy's order; dots stay outside unless `sums`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xlaplug.backends.cpu import region_code as RC
from xlaplug.hlo import parse_module
from xlaplug.hlo.text.printer import module_to_text
from xlaplug.runtime.driver import compile_module
from xlaplug.runtime.runner import execute

R = np.random.default_rng(0)
X = R.standard_normal((8, 16)).astype(np.float32)
W = R.standard_normal((16, 4)).astype(np.float32)


def chain(x, w):  # elementwise, broadcasts, transposes, slices, a concatenate, a dot, sums
    y = jnp.tanh(x * 0.5 + 1.0) - jnp.exp(-x)
    z = jnp.concatenate([y[:, :8].T, jnp.maximum(y[:, 8:], 0.0).T], axis=0)
    h = y @ w
    s = jnp.sum(h * h, axis=1)                      # rows: numpy's pairwise order
    t = jnp.max(jnp.abs(z), axis=1) + jnp.sum(z * z)  # rows, and everything
    c = jnp.sum(jnp.cos(y), axis=0)                 # columns: numpy's iterator order
    return z.T * 2.0 + x, jnp.where(s > 1.0, s, -s), h + 1.0, t, c


def mixed(x):  # a sort reads a region's value; later small ops do not read the sort
    a = jnp.exp(jnp.sin(x) + 1.0)
    b = jnp.sort(a, axis=1)
    c = jnp.maximum(jnp.cos(x) - jnp.tanh(a), 0.5)
    return jnp.abs(b - 1.0) + 2.0, jnp.sqrt(c) / a


def _module(f, *args, **opts):
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    m = parse_module(text)
    compile_module(m, None, options={"small-regions": opts} if opts else None)
    return m


def _regions(m):
    return [i for i in m.entry.instructions if RC.is_region(i)]


def _members(region):
    return [i.opcode for i in region.attrs["calls"][0].instructions
            if i.opcode not in ("parameter", "tuple", "constant")]


def _opcodes(comp):  # with those of the fusions it calls
    return {op for i in comp.instructions
            for op in (i.opcode, *(o for c in i.called_computations() for o in _opcodes(c)))}


@pytest.fixture
def hot(monkeypatch):
    """Regions compile on their first call."""
    monkeypatch.setattr(RC, "HOT_CALLS", 0)
    compiled = []
    real = RC.RegionCode.function

    def function(self):
        compiled.append(self)
        return real(self)
    monkeypatch.setattr(RC.RegionCode, "function", function)
    return compiled


@pytest.mark.parametrize("f,args,sums", [(chain, (X, W), False), (chain, (X, W), True),
                                         (mixed, (X,), False)])
def test_regions_match_jax_and_the_interpreter_bit_for_bit(f, args, sums, hot):
    m = _module(f, *args, sums=sums)
    assert _regions(m)
    got = execute(m, list(args)).outputs
    assert hot, "no region ran compiled"
    want = jax.tree.leaves(jax.jit(f)(*args))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=2e-6)
    off = execute(_module(f, *args, enabled=False), list(args)).outputs
    for g, o in zip(got, off):
        if sums:  # a dot or a sum in another order: close, not the same bits
            np.testing.assert_allclose(g, o, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g.view(np.uint32), o.view(np.uint32))


def batch_norm(x, y):  # sums over leading, middle and mixed dimensions, as in a CNN step
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
    h = jnp.maximum((x - mean) / jnp.sqrt(var + 1e-5), 0.0)
    return (h, jnp.mean(h, axis=(1, 2)), jnp.sum(h * 2.0, axis=(0, 3)),
            jnp.max(jnp.abs(x), axis=(0, 3)), jnp.sum(y * y, axis=0), jnp.sum(x[:1], axis=0))


XB = (R.standard_normal((4, 6, 5, 16)) * np.exp(R.standard_normal((4, 6, 5, 16)) * 3)
      ).astype(np.float32)
Y = R.standard_normal((300, 7)).astype(np.float32)


def tiny(x):  # folds of subnormals: flushed as the kernel's FTZ / DAZ flush them
    a = jnp.abs(x)  # (negate and abs do not flush)
    return jnp.sum(-x, axis=0), jnp.sum(a, axis=(0, 2)), jnp.max(a, axis=2), \
        jnp.min(-a, axis=(0, 2))


XT = np.full((9, 5, 3), 1e-39, np.float32)
XT[::2], XT[1, 1], XT[2, 2], XT[:, 3] = -1e-39, 2e-38, -2e-38 + 1e-41, 0.0


@pytest.mark.parametrize("f,args", [(batch_norm, (XB, Y)), (tiny, (XT,))])
def test_sums_over_any_dimensions_in_numpys_order(f, args, hot):
    m = _module(f, *args)
    inside = [op for r in _regions(m) for op in _members(r)]
    assert "reduce" not in [i.opcode for i in m.entry.instructions]
    assert inside.count("reduce") == (7 if f is batch_norm else 4)
    got = execute(m, list(args)).outputs
    assert hot, "no region ran compiled"
    for g, w in zip(got, jax.tree.leaves(jax.jit(f)(*args))):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=1e-6 * np.abs(w).max())
    off = execute(_module(f, *args, enabled=False), list(args)).outputs
    for g, o in zip(got, off):
        np.testing.assert_array_equal(g.view(np.uint32), o.view(np.uint32))


@pytest.mark.parametrize("dims,red,nest", [
    ((32, 128), {0}, [(True, 32), (False, 128)]),
    ((8, 16, 16, 16), {0, 1, 2}, [(True, 2048), (False, 16)]),
    ((8, 16, 16, 16), {1, 2}, [(False, 8), (True, 256), (False, 16)]),
    ((6, 1, 9, 10), {0, 2}, [(True, 54), (False, 10)]),  # size 1 dropped, then merged
    ((2, 3, 260), {0, 2}, [(True, 2), (False, 3), (True, 260)]), ((1, 1), {0}, [])])
def test_numpys_loop_nest(dims, red, nest):
    from xlaplug.backends.cpu.region_sums import numpy_order
    assert numpy_order(dims, red) == nest


def xent(logits, labels, emb, ids):  # a loss's gather / scatter-add, and embedding rows
    def loss(z):
        logp = jax.nn.log_softmax(z)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
    val, g = jax.value_and_grad(loss)(logits * 1.5)
    rows = emb[ids] * 2.0                            # rows gathered, ids out of range clamp
    back = jnp.zeros_like(emb).at[ids].add(rows + 1.0)  # repeated ids: in order; far: dropped
    put = (emb * 0.5).at[ids[:3], 1].set(rows[:3, 0] - 1.0, mode="drop")
    return val, g * 2.0, rows + 1.0, back - 1.0, put + 0.0


LOGITS = R.standard_normal((32, 10)).astype(np.float32)
LABELS = R.integers(0, 10, 32).astype(np.int32)
EMB = R.standard_normal((20, 8)).astype(np.float32)
IDS = np.array([3, 7, 3, 19, 25, -4, 0, 7], np.int32)


def test_gathers_and_scatters_join_regions(hot):
    args = (LOGITS, LABELS, EMB, IDS)
    m = _module(xent, *args)
    inside = [op for r in _regions(m) for op in _members(r)]
    assert not {"gather", "scatter"} & {i.opcode for i in m.entry.instructions}
    assert inside.count("gather") == 2 and inside.count("scatter") == 3
    got = execute(m, list(args)).outputs
    assert hot, "no region ran compiled"
    for g, w in zip(got, jax.tree.leaves(jax.jit(xent)(*args))):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=2e-6)
    off = execute(_module(xent, *args, enabled=False), list(args)).outputs
    for g, o in zip(got, off):
        np.testing.assert_array_equal(g.view(np.uint32), o.view(np.uint32))


def test_dots_and_unsupported_ops_stay_outside():
    m = _module(chain, X, W)
    inside = [op for r in _regions(m) for op in _members(r)]
    outside = [i for i in m.entry.instructions]
    assert "dot" in [i.opcode for i in outside] and "dot" not in inside
    assert "reduce" not in [i.opcode for i in outside]
    assert inside.count("reduce") == 4
    assert {"concatenate", "transpose"} <= set(inside)
    assert {"tanh", "exponential"} <= set().union(
        *(_opcodes(r.attrs["calls"][0]) for r in _regions(m)))
    m = _module(chain, X, W, sums=True)
    assert {"dot", "reduce"} <= {op for r in _regions(m) for op in _members(r)}
    m = _module(mixed, X)
    assert "sort" in [i.opcode for i in m.entry.instructions]
    assert all("sort" not in _members(r) for r in _regions(m))


def test_the_element_threshold_and_the_instruction_cap():
    big = R.standard_normal((64, 64)).astype(np.float32)
    assert not _regions(_module(mixed, big, max_elements=64 * 64 - 1))
    assert _regions(_module(mixed, big, max_elements=64 * 64))
    whole = _module(chain, X, W, sums=True)
    capped = _module(chain, X, W, sums=True, max_instructions=4)
    assert len(_regions(capped)) > len(_regions(whole))
    assert all(len(_members(r)) <= 4 for r in _regions(capped))
    few = _module(chain, X, W, min_instructions=100)
    assert not _regions(few)


def test_a_region_compiles_only_once_hot_and_interprets_before(monkeypatch):
    # not in the disk cache: a region's first compile waits for HOT_CALLS
    monkeypatch.setattr(RC.RegionCode, "ready", lambda self: self.fn is not None)
    calls = []
    monkeypatch.setattr(RC.RegionCode, "function", lambda self: calls.append(1) or (
        lambda *a: (_ for _ in ()).throw(AssertionError("compiled"))))
    m = _module(mixed, X)
    want = execute(_module(mixed, X, enabled=False), [X]).outputs
    got = execute(m, [X]).outputs  # a module run once: every region interpreted
    assert not calls
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_printed_module_parses_back_and_decompose_all_has_no_region():
    m = _module(chain, X, W)
    text = module_to_text(m)
    assert RC.REGION_KIND in text and "kCustom" in text
    again = parse_module(text)
    assert len(_regions(again)) == len(_regions(m))
    np.testing.assert_array_equal(execute(again, [X, W]).outputs[0],
                                  execute(m, [X, W]).outputs[0])
    p = parse_module(jax.jit(chain).lower(X, W).as_text(dialect="hlo"))
    compile_module(p, None, decompose_all=True)
    assert not any(i.opcode == "fusion" for c in p.computations for i in c.instructions)


def test_constants_only_regions_read_leave_the_entry():
    # A scalar constant is copied into each region that reads it: the entry's own copy,
    # read by nothing after the pass, would still run as a thunk every call.
    m = _module(chain, X, W)
    read = {id(o) for i in m.entry.instructions for o in i.operands}
    assert not [i.name for i in m.entry.instructions
                if i.opcode == "constant" and id(i) not in read]
    assert any(i.opcode == "constant" for r in _regions(m)
               for i in r.attrs["calls"][0].instructions)



_SCALED = """HloModule s
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  w = f32[16,16] parameter(1)
  c = f32[] constant(0.125)
  k = f32[8,16] broadcast(c), dimensions={}
  a = f32[8,16] multiply(x, k)
  b = f32[8,16] tanh(a)
  e = f32[8,16] subtract(b, k)
  d = f32[8,16] dot(e, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[8,16] multiply(d, k)
  g = f32[8,16] tanh(f)
  z = f32[] constant(0)
  r = f32[8] reduce(g, z), dimensions={1}, to_apply=sum
  ROOT t = (f32[8,16], f32[8]) tuple(g, r)
}
"""


def test_a_constant_broadcast_is_made_in_each_region_that_reads_it(hot):
    # One scale read on both sides of a dot: each region makes it (its value in the code),
    # rather than the first region computing the array and handing it to the second.
    m = parse_module(_SCALED)
    compile_module(m, None, passes="small-regions")
    regions = _regions(m)
    assert len(regions) == 2
    assert not [i for i in m.entry.instructions if i.opcode in ("broadcast", "constant")]
    assert all("broadcast" in _members(r) for r in regions)
    x, w = X[:, :16], R.standard_normal((16, 16)).astype(np.float32)
    got = execute(m, [x, w]).outputs
    assert hot, "no region ran compiled"
    off = parse_module(_SCALED)
    compile_module(off, None, passes="none")
    for g, o in zip(got, execute(off, [x, w]).outputs):
        np.testing.assert_array_equal(g.view(np.uint32), o.view(np.uint32))
