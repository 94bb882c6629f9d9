"""A module made on a CPU runs on every XLA backend (issue 26): each workload's portable
artifact (`xlaplug compile --decompose-all`: every plugin op replaced by its decomposition,
none of xlaplug's optimizations) is compiled by each jax platform present and run on the
inputs xlaplug's own run (plugin kernels) got; the two are compared leaf by leaf.

Workloads: every module in examples/ (plugin ops: rms_norm, horovod; a jax MLP), a jax
program with a `jax.ffi.ffi_call` op next to a dot (a test plugin's swish), and jax
programs using jnp.linalg, which jax lowers on CPU to `lapack_*_ffi` custom calls served
by the bundled jax_lapack plugin (cholesky, solve, inv, slogdet, qr, eigh, svd,
triangular solve).  Those whose results are unique only up to signs (eigh, svd) return
what is unique: eigenvalues, singular values and reconstructions.

Tolerance: |theirs - ours| <= tol * max(1, |ours|) per leaf, tol by platform and element
type (printed with the table).  cpu: 1e-4 (f32) / 1e-10 (f64).  tpu, gpu: 2e-2 (f32):
their default f32 dot precision is lower (a TPU rounds dot operands to bf16 unless asked
for HIGHEST, which the LAPACK decompositions do ask for but jax's own dots in the MLP and
the examples do not), and XLA:TPU computes f64 in software, if at all.

Run:  python benchmarks/portable.py [--platform cpu,tpu] [--only NAME,...] [--out DIR]
      [--json]
A module needing D devices (horovod_allreduce4: 4 replicas) runs where the platform has
D; XLA:CPU gets 4 host devices here.  Exit status 1 when any comparison fails.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_force_host_platform_device_count=4").strip()

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TOL = {"cpu": {"f32": 1e-4, "f64": 1e-10}, "tpu": {"f32": 2e-2, "f64": 1e-6},
       "gpu": {"f32": 2e-2, "f64": 1e-10}}


def swish_plugin():
    from xlaplug.plugin import Plugin
    p = Plugin("portable_swish", version="0")

    @p.shape("acme.swish")
    def shape(x, *, beta=1.0):
        return x

    @p.decomposition("acme.swish")
    def decomposed(b, x, *, beta=1.0):
        return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))

    @p.kernel("acme.swish", device="cpu")
    def kernel(x, out, *, beta=1.0):
        out[...] = x / (1 + np.exp(-x.dtype.type(beta) * x))
    return p


def _matrices(rng):
    def general(*shape):
        x = rng.standard_normal(shape).astype(np.float32)
        return x + shape[-1] * np.eye(shape[-1], dtype=np.float32) if shape[-2] == shape[-1] else x

    def spd(n):
        x = rng.standard_normal((n, n))
        return (x @ x.T + n * np.eye(n)).astype(np.float32)

    def sym(n):
        x = rng.standard_normal((n, n))
        return (x + x.T).astype(np.float32)
    return general, spd, sym


def jax_programs():
    """name -> (function, arguments): the jnp.linalg programs and the ffi_call one."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    general, spd, sym = _matrices(np.random.default_rng(0))

    def eigh(a):
        w, v = jnp.linalg.eigh(a)
        return w, (v * w) @ v.T

    def svd(a):
        u, s, vt = jnp.linalg.svd(a, full_matrices=False)
        return s, (u * s) @ vt

    def swish_after_dot(x, w):
        y = x @ w
        call = jax.ffi.ffi_call("acme.swish", jax.ShapeDtypeStruct(y.shape, y.dtype))
        return call(y, beta=np.float32(1.5))
    return {
        "ffi_swish_dot": (swish_after_dot, (general(8, 16), general(16, 8) * 0.25)),
        "linalg_cholesky": (jnp.linalg.cholesky, (spd(6),)),
        "linalg_solve": (jnp.linalg.solve, (general(6, 6), general(6, 2))),
        "linalg_inv": (jnp.linalg.inv, (general(2, 5, 5),)),
        "linalg_slogdet": (lambda a: tuple(jnp.linalg.slogdet(a)), (general(6, 6),)),
        "linalg_qr": (lambda a: tuple(jnp.linalg.qr(a)), (general(6, 4),)),
        "linalg_eigh": (eigh, (sym(6),)),
        "linalg_svd": (svd, (general(6, 4),)),
        "linalg_triangular_solve": (lambda a, b: jsl.solve_triangular(a, b, lower=True),
                                    (general(6, 6), general(6, 3))),
    }


def workloads(only):
    """[(name, HLO text, stacked arguments or None for random, extra plugins)]"""
    import jax
    out = []
    for f in sorted((ROOT / "examples").glob("*.hlo")):
        out.append((f"example_{f.stem}", f.read_text(), None, []))
    for name, (fn, args) in jax_programs().items():
        if only and name not in only:
            continue
        # Lowered for the CPU whatever the default backend: "a jax program made on a CPU"
        # (its jnp.linalg as lapack_*_ffi calls), whose artifact then runs elsewhere.
        text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cpu",)).as_text(
            dialect="hlo")
        out.append((name, text, list(args), [swish_plugin()] if "swish" in name else []))
    return [w for w in out if not only or w[0] in only]


def random_args(exe, seed=0):
    """One argument per parameter, stacked on a leading axis of D on D > 1 devices."""
    from xlaplug.runtime.inputs import random_value
    rng = np.random.default_rng(seed)
    d = exe.num_devices
    args = []
    for p in exe.module.entry.parameters:
        vals = [random_value(p.shape, rng, p.name) for _ in range(d)]
        args.append(vals[0] if d == 1 else np.stack(vals))
    return args


def compare(ours, theirs, tol):
    """(ok, worst error relative to max(1, |ours|), what failed)"""
    from xlaplug.hlo.dtypes import from_dtype
    worst = 0.0
    for k, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return False, float("nan"), f"out{k}: shape {a.shape} vs {b.shape}"
        if a.dtype.kind in "biu":
            if not np.array_equal(a, b):
                return False, float("nan"), f"out{k}: integers differ"
            continue
        scale = max(1.0, float(np.max(np.abs(a)))) if a.size else 1.0
        err = float(np.max(np.abs(a.astype(np.complex128) - b))) / scale if a.size else 0.0
        etype = from_dtype(a.dtype)
        if not err <= tol.get({"c64": "f32", "c128": "f64"}.get(etype, etype), tol["f32"]):
            return False, err, f"out{k}: error {err:.2e}"
        worst = max(worst, err)
    return True, worst, ""


def run_one(name, text, args, plugins, platforms, out_dir):
    import xlaplug
    from xlaplug.xla.jaxlib_names import XlaError
    from xlaplug.xla.xla_executables import run_on_xla
    rows = []
    exe = xlaplug.compile(text, plugins=plugins)
    args = random_args(exe) if args is None else args
    ours = [np.asarray(o) for o in exe(*args)]
    art = xlaplug.compile(text, plugins=plugins, decompose_all=True)
    path = out_dir / f"{name}.hlo"
    path.write_text(art.hlo)
    d = exe.num_devices
    per_device = [[a if d == 1 else a[i] for a in args] for i in range(d)]
    for platform in platforms:
        tol = TOL.get(platform, TOL["gpu"])
        try:
            res = run_on_xla(art.hlo, per_device, platform, exe.grid.replicas,
                             exe.grid.partitions, what=f"portable {name}")
        except XlaError as e:
            rows.append((name, platform, "skip" if "devices, the module needs" in e.message
                         else "FAIL", float("nan"), e.message.splitlines()[0][:90]))
            continue
        theirs = res[0] if d == 1 else [np.stack([r[k] for r in res]) for k in range(len(res[0]))]
        ok, err, why = compare(ours, theirs, tol)
        rows.append((name, platform, "ok" if ok else "FAIL", err, why))
    return rows


def present_platforms():
    import jax
    found = []
    for p in ("cpu", "tpu", "gpu"):
        try:
            if jax.devices(p):
                found.append(p)
        except RuntimeError:
            pass
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", default=None,
                    help="comma-separated jax platforms (default: every one present)")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--out", default=None, help="write the artifacts here (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    present = present_platforms()
    platforms = a.platform.split(",") if a.platform else present
    missing = [p for p in platforms if p not in present]
    if missing:
        print(f"error: jax has no platform {', '.join(missing)} here (present: "
              f"{', '.join(present)})", file=sys.stderr)
        return 2
    only = {w for w in a.only.split(",") if w}
    out_dir = Path(a.out or tempfile.mkdtemp(prefix="xlaplug-portable-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, text, args, plugins in workloads(only):
        rows += run_one(name, text, args, plugins, platforms, out_dir)
    if a.json:
        print(json.dumps({"tolerances": {p: TOL.get(p, TOL["gpu"]) for p in platforms},
                          "rows": [dict(zip(("workload", "platform", "result", "max_rel_err",
                                             "detail"), r)) for r in rows]}, indent=1))
    else:
        print("tolerances (max |theirs - ours| / max(1, |ours|)): " + "; ".join(
            f"{p}: " + ", ".join(f"{t} {v:g}" for t, v in TOL.get(p, TOL["gpu"]).items())
            for p in platforms))
        print(f"artifacts in {out_dir}")
        print(f"{'workload':<26} {'platform':<8} {'result':<6} {'max rel err':>11}  detail")
        for name, platform, res, err, why in rows:
            print(f"{name:<26} {platform:<8} {res:<6} {err:>11.2e}  {why}")
    return 1 if any(r[2] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
