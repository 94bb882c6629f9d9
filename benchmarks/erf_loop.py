"""f32 erf in a fused loop, before and after issue 23's vectorized form, against XLA:CPU.

One process, one f32[4M] input (normal, scale 2), alternating rounds of

  before    the fused loop with f32 erf as it was: libm's erf on the value widened to f64,
            one call per element (the op table's erf entry taken out for this compile)
  after     the fused loop with XLA's rational interpolant in f32 (scalar_float_approx32
            ._xerf32), inlined and vectorized
  xlaplug   `xlaplug.compile` of jax's module for lax.erf, called as exe(x) (one erf
            instruction, no fusion: elementwise_math's compiled loop of the same expression)
  XLA:CPU   jax.jit(lax.erf), block_until_ready

medians over all runs (the first of each, with its compile, left out), the load average
before and after, and the ratios.  Outputs are checked against XLA's first: `after` and
`xlaplug` bit for bit, `before` within 8 ULP (libm's erf is not XLA's: up to 7 apart).  The
loops run over numba's threads, as the executable's do.

Run:  python benchmarks/erf_loop.py [--rounds 5] [--repeat 10] [--n 4194304]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLAPLUG_JIT_CACHE"] = "0"  # both loops compiled here (the IR is read below)

import numpy as np  # noqa: E402


def _loop(n: int, old: bool):
    from xlaplug.backends.common import scalar_ops_unary as U
    from xlaplug.backends.common.fusion_contents import loop_shape
    from xlaplug.backends.cpu.fused_loop import compiled_loop_fn
    from xlaplug.hlo import parse_module
    text = (f"HloModule e\n\nfused {{\n  p0 = f32[{n}] parameter(0)\n"
            f"  ROOT r = f32[{n}] erf(p0)\n}}\n\nENTRY main {{\n  a = f32[{n}] parameter(0)\n"
            f"  ROOT f = f32[{n}] fusion(a), kind=kLoop, calls=fused\n}}\n")
    comp = next(c for c in parse_module(text).computations if c.name == "fused")
    saved = U._UNARY_F32.pop("erf") if old else None
    try:
        fn = compiled_loop_fn(comp, tuple(loop_shape(comp)))
        out = np.empty(n, np.float32)
        fn(out, np.zeros(n, np.float32))  # compiles here, with the table as it is now
    finally:
        if saved is not None:
            U._UNARY_F32["erf"] = saved
    calls_erf = "@erf" in fn.inspect_llvm(fn.signatures[0])
    assert calls_erf == old, "the loops are not the two forms"
    return lambda x: fn(out, x) or out


def _ulp(a, b):
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(2 ** 31) - ia, ia)
    ib = np.where(ib < 0, -(2 ** 31) - ib, ib)
    return int(np.abs(ia - ib).max())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--n", type=int, default=1 << 22)
    a = ap.parse_args()
    import jax
    from jax import lax

    import xlaplug
    load0 = os.getloadavg()
    x = (np.random.default_rng(0).standard_normal(a.n) * 2).astype(np.float32)
    jf = jax.jit(lax.erf)
    xd = jax.device_put(x)
    want = np.asarray(jf(xd))
    exe = xlaplug.compile(jf.lower(x).as_text(dialect="hlo"))
    runs = {"before": _loop(a.n, old=True), "after": _loop(a.n, old=False),
            "xlaplug": lambda v: exe(v)[0], "XLA:CPU": lambda v: jf(v).block_until_ready()}
    before_ulp = _ulp(runs["before"](x).copy(), want)
    assert before_ulp <= 8, before_ulp
    for name in ("after", "xlaplug"):
        got = np.asarray(runs[name](x))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.rounds):
        for name, f in runs.items():
            arg = xd if name == "XLA:CPU" else x
            f(arg)
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                f(arg)
                times[name].append(time.perf_counter() - t0)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"erf f32[{a.n}], {a.rounds} rounds x {a.repeat} runs, {os.cpu_count()} cores, "
          f"load {load0[0]:.2f} before, {load1[0]:.2f} after")
    for k, v in med.items():
        print(f"  {k:8s} {v:8.2f} ms   {v / med['XLA:CPU']:6.2f}x XLA:CPU")
    print(f"  before/after {med['before'] / med['after']:.2f}x; before was up to {before_ulp} ULP "
          "from XLA's values, after and xlaplug bit for bit")


if __name__ == "__main__":
    main()
