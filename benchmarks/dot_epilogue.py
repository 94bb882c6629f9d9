"""The dot-epilogue pass, A/B: each workload compiled with the default pipeline and with the
same pipeline less `dot-epilogue`, checked bit for bit against each other, then timed in
alternating rounds in this one process (each round: --repeat runs of A, then of B; the
figure is the median over rounds of the ratio of their medians), with the load average
before and after.  Peak bytes are the runs' own accounting (RunResult.peak_bytes).

Workloads (jax functions lowered with jax.jit(f).lower(...).as_text(dialect="hlo")):
  relu_k1024   relu(x @ w + b), x[512,1024], w[1024,1024]   (issue 23's MLP layer)
  relu_k128    relu(x @ w + b), x[4096,128], w[128,1024]     (a short product: the
               epilogue's pass over memory is a larger share)
  gelu_k256    gelu(x @ w + b), x[2048,256], w[256,1024]
  mlp          run.py's mlp: relu(x @ w1 + b) @ w2, x[512,1024], w1, w2[1024,1024]
  conv_relu    relu(conv3x3(x, w) + b), NHWC 8x56x56x64 -> 64
  transformer  models.py's transformer_f32 block forward

Run:  python benchmarks/dot_epilogue.py [--rounds 7] [--repeat 5] [--only NAME[,NAME]]
Ratios only on a shared machine; a load over 0.5 is flagged.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

WITHOUT = ("sdy-shard-map,custom-call-lowering,inline-calls,tuple-simplify,dce,"
           "excess-precision,reduce-fusion,loop-fusion")


def workloads(rng):
    import jax
    import jax.numpy as jnp

    def n(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def layer(act):
        return lambda x, w, b: act(x @ w + b)

    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y + b)

    def mlp(x, w1, b1, w2):
        return jnp.maximum(x @ w1 + b1, 0.0) @ w2

    out = {
        "relu_k1024": (layer(jax.nn.relu), [n(512, 1024), n(1024, 1024, scale=0.03), n(1024)]),
        "relu_k128": (layer(jax.nn.relu), [n(4096, 128), n(128, 1024, scale=0.09), n(1024)]),
        "gelu_k256": (layer(jax.nn.gelu), [n(2048, 256), n(256, 1024, scale=0.06), n(1024)]),
        "mlp": (mlp, [n(512, 1024), n(1024, 1024, scale=0.03), n(1024, scale=0.1),
                      n(1024, 1024, scale=0.03)]),
        "conv_relu": (conv, [n(8, 56, 56, 64), n(3, 3, 64, 64, scale=0.04), n(64)]),
    }
    from models import make_model
    w = make_model("transformer_f32", False, rng)
    out["transformer"] = (w.jf, w.args)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", default=None)
    opts = ap.parse_args(argv)
    import jax

    import xlaplug
    rng = np.random.default_rng(0)
    table = workloads(rng)
    names = opts.only.split(",") if opts.only else list(table)
    print(f"load before {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    print(f"{'workload':12} {'fused ms':>9} {'unfused ms':>10} {'ratio':>6} "
          f"{'peak MiB':>9} {'unfused':>8} {'thunks':>7} {'unfused':>8}")
    for name in names:
        f, args = table[name]
        text = jax.jit(f).lower(*args).as_text(dialect="hlo")
        a = xlaplug.compile(text, name=name)
        b = xlaplug.compile(text, passes=WITHOUT, name=name)
        ra, rb = a.run(*args), b.run(*args)  # first runs: compiles, disk cache
        for x, y in zip(ra.outputs, rb.outputs):
            if np.asarray(x).tobytes() != np.asarray(y).tobytes():
                print(f"{name}: fused and unfused outputs differ", file=sys.stderr)
                return 1
        ratios, ta, tb = [], [], []
        for _ in range(opts.rounds):
            ma = statistics.median(a.run(*args, repeat=opts.repeat).run_times)
            mb = statistics.median(b.run(*args, repeat=opts.repeat).run_times)
            ta.append(ma)
            tb.append(mb)
            ratios.append(ma / mb)
        print(f"{name:12} {statistics.median(ta) * 1e3:9.2f} {statistics.median(tb) * 1e3:10.2f} "
              f"{statistics.median(ratios):6.3f} {ra.peak_bytes / 2**20:9.1f} "
              f"{rb.peak_bytes / 2**20:8.1f} {len(a.thunks.thunks):7d} "
              f"{len(b.thunks.thunks):8d}", flush=True)
    load = os.getloadavg()[0]
    print(f"load after {load:.2f}" + ("  (over 0.5: ratios only, not figures)"
                                      if load > 0.5 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
