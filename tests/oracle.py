"""Shared helpers for the tests that check xlaplug against jax / XLA:CPU (the oracle).

* running HLO text with `run_module`, and flattening results into numpy leaves;
* lowering a jax function, running both HLO forms jax gives (lowered and XLA:CPU's optimized
  HLO) and comparing them with jax's own result (`check_against_jax`);
* compiling StableHLO text with XLA:CPU through jax internals (`xla_cpu_run`);
* leaf-by-leaf comparison, ULP distances and the deterministic input generators of the
  elementwise tests.

jax is imported inside the functions that need it, so importing this module never needs jax
(the test files that need it `pytest.importorskip` it first).
"""
from __future__ import annotations

import contextlib
import zlib

import ml_dtypes
import numpy as np
import pytest

from xlaplug.hlo import dtypes as D
from xlaplug.hlo.text.parser import parse_module



# ---- running HLO, flattening results --------------------------------------------------------

def run_text(text: str, *args):
    """Parses HLO text and runs it with `run_module` on `args`."""
    from xlaplug.runtime.executor import run_module
    return run_module(parse_module(text), list(args))


def cuda_and_cpu(module, args, **opts):
    """(cuda result, cpu result) of one parsed module run with `run_module` on `args`."""
    from xlaplug.runtime.executor import run_module
    return (run_module(module, list(args), device="cuda", **opts),
            run_module(module, list(args), device="cpu", **opts))


def lowered_module(f, *args, x64=False, opcode=None):
    """(hlo text, parsed module) of f lowered by jax; the module must use `opcode` if given."""
    import jax
    with jax.enable_x64(x64):
        text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    module = parse_module(text)
    if opcode is not None:
        assert any(i.opcode == opcode for c in module.computations
                   for i in c.instructions), text
    return text, module


def as_list(out) -> list:
    """A result of `run_module` as a list of its top-level outputs."""
    return list(out) if isinstance(out, tuple) else [out]


def leaves(v) -> list[np.ndarray]:
    """The leaves of a (nested) tuple/list result as numpy arrays, in order."""
    if isinstance(v, (tuple, list)):
        return [y for x in v for y in leaves(x)]
    return [np.asarray(v)]


def leaf_pairs(got, want, what, indexed=True):
    """Yields (name, got leaf, want leaf) after asserting the two results have as many leaves
    and each pair the same dtype and shape (checked pair by pair, as they are yielded).
    `indexed` names each leaf `what[i]` in the messages; otherwise every message is `what`."""
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), f"{what}: {len(g)} results, jax has {len(w)}" if indexed else what
    for i, (a, b) in enumerate(zip(g, w)):
        where = f"{what}[{i}]" if indexed else what
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
        yield where, a, b


def assert_leaves_close(got, want, what="", rtol=0.0, exact=True):
    """Integers and pred exactly; floats and complex (widened) bit-exactly when `exact`, else
    to rtol = atol = `rtol`."""
    for msg, a, b in leaf_pairs(got, want, what):
        if a.dtype.kind in "fc" or a.dtype == ml_dtypes.bfloat16:
            a64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
            b64 = b.astype(a64.dtype)
            if exact:
                np.testing.assert_array_equal(a64, b64, err_msg=msg)
            else:
                np.testing.assert_allclose(a64, b64, rtol=rtol, atol=rtol, err_msg=msg)
        else:
            np.testing.assert_array_equal(a, b, err_msg=msg)


# ---- jax as the oracle ----------------------------------------------------------------------

STACK_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def strip_stack_tables(text: str) -> str:
    """HLO text without the stack-frame tables `compile().as_text()` prints (debug metadata)."""
    out, skipping = [], False
    for line in text.splitlines():
        if line.strip() in STACK_TABLES:
            skipping = True
        elif skipping and not line.strip():
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def entry(*instructions: str) -> str:
    """HLO text of one entry computation holding `instructions`, the last one its ROOT."""
    *body, root = instructions
    return "HloModule m\nENTRY e {\n" + "".join(f"  {i}\n" for i in body) + f"  ROOT {root}\n}}\n"


def hlo_text(lowered, mode: str, strip_tables: bool = False, compiled=None) -> str:
    """The lowered HLO ("lowered"), or XLA:CPU's optimized HLO, as text (`strip_tables`: without
    the stack-frame tables; `compiled`: `lowered.compile()` where the caller has it)."""
    if mode == "lowered":
        return lowered.as_text(dialect="hlo")
    text = (compiled or lowered.compile()).as_text()
    return strip_stack_tables(text) if strip_tables else text


def check_against_jax(f, args, compare, x64=False, modes=("lowered", "compiled"),
                      keep_unused=False, strip_tables=False, expect_op=None):
    """Runs f through jax and through `run_module` on each HLO form of `modes`;
    `compare(got, want, mode)` judges each result.  `expect_op`: an opcode the lowered HLO
    must contain."""
    import jax
    cm = jax.enable_x64(True) if x64 else contextlib.nullcontext()
    with cm:
        # One XLA compile gives both the expected values and the optimized HLO: `jf(*args)`
        # and `lower().compile()` each compile (jax keeps no executable between them), and
        # XLA's compile is most of these tests' time.
        lowered = jax.jit(f, keep_unused=keep_unused).lower(*args)
        compiled = lowered.compile()
        want = compiled(*args)
        for mode in modes:
            text = hlo_text(lowered, mode, strip_tables, compiled)
            if expect_op is not None and mode == "lowered":
                assert f" {expect_op}(" in text, f"no {expect_op} in the lowered HLO"
            compare(run_text(text, *args), want, mode)


def both(f, *args):
    """(ours, jax's) outputs of f(*args), as lists of numpy arrays."""
    import jax
    lowered = jax.jit(f, keep_unused=True).lower(*args)
    ours = as_list(run_text(lowered.as_text(dialect="hlo"), *args))
    theirs = lowered.compile()(*args)
    theirs = [np.asarray(t) for t in (theirs if isinstance(theirs, (tuple, list)) else [theirs])]
    return ours, theirs


def xla_cpu_run(mlir_text, *args):
    """Compile a StableHLO module with XLA:CPU (through the bridge, xlaplug/xla) and run it."""
    from xlaplug.xla.xla_executables import run_stablehlo_on_xla_cpu
    return run_stablehlo_on_xla_cpu(mlir_text, list(args))


def jax_shard_map():
    """jax's shard_map (jax.shard_map, or jax.experimental.shard_map on older jax)."""
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map
    return shard_map


# ---- deterministic inputs (elementwise tests) ------------------------------------------------

def rng(*key):
    """A generator seeded by `key`, so inputs do not depend on which tests ran before."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def float_edges(t: str) -> np.ndarray:
    dt = D.to_dtype(t)
    fi = ml_dtypes.finfo(dt)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.0, 0.25, -0.75, 7.0,
            float(fi.max), -float(fi.max), float(fi.tiny), -float(fi.tiny), float(fi.eps),
            1 + float(fi.eps), float(fi.smallest_subnormal), -float(fi.smallest_subnormal),
            float(fi.tiny) / 2, float(fi.tiny) * 0.75, 100.0, -1000.0, 0.1, 1e-3,
            np.inf, -np.inf, np.nan, -np.nan]
    with np.errstate(all="ignore"):
        return np.array(vals, np.float64).astype(dt)


def float_inputs(t: str, n: int = 300, scale: float = 10.0, seed=0) -> np.ndarray:
    dt = D.to_dtype(t)
    g = rng("float", t, n, scale, seed)
    r = g.standard_normal(n) * scale
    r[: n // 3] *= 10.0 ** g.integers(-8, 8, n // 3)
    with np.errstate(all="ignore"):
        return np.concatenate([float_edges(t), r.astype(dt)])


def int_edges(t: str) -> np.ndarray:
    dt = D.to_dtype(t)
    info = ml_dtypes.iinfo(dt)
    vals = sorted({0, 1, 2, 3, 7, 8, 31, 32, 33, 63, 64, 65, info.max, info.max - 1, info.min,
                   info.min + 1, -1, -2, -3, -8, -31, -32, -33, -64, -65, 100, -100})
    vals = [v for v in vals if info.min <= v <= info.max]
    return np.array(vals, np.uint64 if info.min >= 0 else np.int64).astype(dt)


def int_inputs(t: str, n: int = 200, seed=0) -> np.ndarray:
    dt = D.to_dtype(t)
    info = ml_dtypes.iinfo(dt)
    wide = np.int64 if int(info.max) < 2**63 else np.uint64
    r = rng("int", t, n, seed).integers(int(info.min), int(info.max), n, endpoint=True,
                                        dtype=wide)
    return np.concatenate([int_edges(t), r.astype(dt)])


def pairs(x, y=None):
    y = x if y is None else y
    a, b = np.meshgrid(x, y, indexing="ij")
    return a.reshape(-1), b.reshape(-1)


def subnormal(x) -> np.ndarray:
    x = np.asarray(x)
    v = np.abs(x.astype(np.float64))
    tiny = float(ml_dtypes.finfo(x.dtype).tiny)
    return (v > 0) & (v < tiny)


# ---- ULP comparison -------------------------------------------------------------------------

def _keys(a: np.ndarray) -> np.ndarray:
    w = a.dtype.itemsize * 8
    s = a.view(f"i{a.dtype.itemsize}").astype(np.int64)
    return np.where(s < 0, -(s & ((1 << (w - 1)) - 1)), s)


def ulp_distance(a, b) -> np.ndarray:
    """Per-element ULP distance (NaN vs NaN = 0, NaN vs a number = huge, -0 vs +0 = 1)."""
    a, b = np.asarray(a), np.asarray(b)
    d = np.abs(_keys(a) - _keys(b))
    an, bn = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    d = np.where(an & bn, 0, d)
    d = np.where((d == 0) & (np.signbit(a.astype(np.float64)) != np.signbit(b.astype(np.float64)))
                 & ~an, 1, d)
    return np.where(an != bn, 1 << 62, d)


def assert_same(ours, theirs, ulp: int = 0, ctx=""):
    """Same dtype and shape; equal values (floats: bit-exact up to NaN payloads, or within
    `ulp` ULPs; complex: per component)."""
    assert ours.dtype == theirs.dtype, f"{ctx}: dtype {ours.dtype} != {theirs.dtype}"
    assert ours.shape == theirs.shape, f"{ctx}: shape {ours.shape} != {theirs.shape}"
    if ours.dtype.kind == "c":
        assert_same(ours.real.copy(), theirs.real.copy(), ulp, ctx + " (real)")
        assert_same(ours.imag.copy(), theirs.imag.copy(), ulp, ctx + " (imag)")
        return
    o, t = ours.reshape(-1), theirs.reshape(-1)
    if D.is_float(D.from_dtype(ours.dtype)):
        bad = np.nonzero(ulp_distance(o, t) > ulp)[0]
        what = f"more than {ulp} ULP"
    else:
        bad = np.nonzero(o != t)[0]
        what = "values"
    assert bad.size == 0, (f"{ctx}: {bad.size} elements differ ({what}); first at {bad[:6]}: "
                           f"ours={o[bad[:6]]} xla={t[bad[:6]]}")


def max_ulp(ours, theirs) -> int:
    if ours.dtype.kind == "c":
        return max(max_ulp(ours.real.copy(), theirs.real.copy()),
                   max_ulp(ours.imag.copy(), theirs.imag.copy()))
    return int(ulp_distance(ours.reshape(-1), theirs.reshape(-1)).max(initial=0))


def count_host_copies(monkeypatch) -> dict:
    """Counts device->host copies from now on: DeviceNDArray.copy_to_host (the simulator's
    too), on a GPU numba's driver-level device_to_host (element reads, __array__ ...), and
    the executor's scalar reads (predicates, branch indices)."""
    from numba import cuda
    from numba.core import config
    counts = {"copy_to_host": 0, "device_to_host": 0, "scalar": 0}
    cls = type(cuda.to_device(np.zeros(1)))
    orig = cls.copy_to_host

    def copy_to_host(self, *a, **k):
        counts["copy_to_host"] += 1
        return orig(self, *a, **k)
    monkeypatch.setattr(cls, "copy_to_host", copy_to_host)
    if not config.ENABLE_CUDASIM:
        from numba.cuda.cudadrv import driver
        d2h = driver.device_to_host

        def device_to_host(*a, **k):
            counts["device_to_host"] += 1
            return d2h(*a, **k)
        monkeypatch.setattr(driver, "device_to_host", device_to_host)
    from xlaplug.backends.device import CudaMemory
    scalar = CudaMemory.scalar

    def counted_scalar(self, value):
        counts["scalar"] += 1
        return scalar(self, value)
    monkeypatch.setattr(CudaMemory, "scalar", counted_scalar)
    return counts
