"""run.py's workloads: the six kernel workloads defined here (their sizes are listed in
run.py's docstring) and the model workloads of models.py, each made on demand (jax imported
then) as a Workload: a jax function, its numpy twin and f32 inputs, at full or --quick size.
"""
from __future__ import annotations

import numpy as np

from models import DEVICES, MODELS, Workload, make_model  # (benchmarks/models.py)

KERNELS = ["elementwise", "mlp", "softmax", "conv3x3", "while_loop", "scan_rnn"]
WORKLOADS = KERNELS + MODELS


def make_kernel_workload(name: str, quick: bool, rng: np.random.Generator):
    """(description, jax fn, numpy fn, list of f32 numpy inputs) of the six kernel workloads."""
    import jax.numpy as jnp
    from jax import lax

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    if name == "elementwise":
        n = 256 if quick else 2048

        def jf(x, y):
            return jnp.tanh(x) * y + jnp.exp(-x) - jnp.maximum(x, y) * 0.5 + jnp.sqrt(jnp.abs(y))

        def nf(x, y):
            return np.tanh(x) * y + np.exp(-x) - np.maximum(x, y) * np.float32(0.5) \
                + np.sqrt(np.abs(y))

        return f"f32[{n},{n}] x2, 8 ops", jf, nf, [normal(n, n), normal(n, n)]

    if name == "mlp":
        b, d, h = (64, 128, 128) if quick else (512, 1024, 1024)

        def jf(x, w1, b1, w2):
            return jnp.maximum(x @ w1 + b1, 0.0) @ w2

        def nf(x, w1, b1, w2):
            return np.maximum(x @ w1 + b1, np.float32(0)) @ w2

        args = [normal(b, d), normal(d, h, scale=d ** -0.5), normal(h, scale=0.1),
                normal(h, h, scale=h ** -0.5)]
        return f"x[{b},{d}] @ w1[{d},{h}] + b, relu, @ w2[{h},{h}]", jf, nf, args

    if name == "softmax":
        r, c = (256, 128) if quick else (4096, 1024)

        def jf(x):
            import jax
            return jax.nn.softmax(x, axis=-1)

        def nf(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        return f"f32[{r},{c}], last axis", jf, nf, [normal(r, c)]

    if name == "conv3x3":
        n, ci, hw, co = (2, 8, 16, 8) if quick else (8, 64, 56, 64)

        def jf(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

        def nf(x, w):
            # Sum of 9 shifted 1x1 convolutions, each a BLAS matmul via tensordot.
            N, C, H, W = x.shape
            xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
            out = np.zeros((w.shape[0], N, H, W), np.float32)
            for i in range(3):
                for j in range(3):
                    out += np.tensordot(w[:, :, i, j], xp[:, :, i:i + H, j:j + W],
                                        axes=([1], [1]))
            return out.transpose(1, 0, 2, 3)

        args = [normal(n, ci, hw, hw), normal(co, ci, 3, 3, scale=(9 * ci) ** -0.5)]
        return f"{n}x{ci}x{hw}x{hw} NCHW -> {co} ch, SAME", jf, nf, args

    if name == "while_loop":
        iters = 100 if quick else 2000

        def jf(x):
            def body(i, c):
                return jnp.sin(c) * 0.9 + jnp.cos(c) * 0.1 + 0.001 * i
            return lax.fori_loop(0, iters, body, x)

        def nf(x):
            c = x
            for i in range(iters):
                c = np.sin(c) * np.float32(0.9) + np.cos(c) * np.float32(0.1) \
                    + np.float32(0.001 * i)
            return c

        return f"fori_loop {iters} its, f32[16]", jf, nf, [normal(16)]

    if name == "scan_rnn":
        steps, h = (50, 16) if quick else (1000, 64)

        def jf(h0, xs, w):
            def cell(c, x):
                c = jnp.tanh(w @ c + x)
                return c, c.sum()
            return lax.scan(cell, h0, xs)[1]  # the per-step sums: every step counts

        def nf(h0, xs, w):
            c, ys = h0, np.empty(len(xs), np.float32)
            for t in range(len(xs)):
                c = np.tanh(w @ c + xs[t])
                ys[t] = c.sum()
            return ys

        return (f"lax.scan {steps} steps, h[{h}] = tanh(w[{h},{h}] @ h + x)", jf, nf,
                [normal(h), normal(steps, h), normal(h, h, scale=h ** -0.5)])

    raise ValueError(name)


def make_workload(name: str, quick: bool, rng: np.random.Generator) -> Workload:
    if name in KERNELS:
        return Workload(*make_kernel_workload(name, quick, rng))
    return make_model(name, quick, rng)


def devices_of(name: str, quick: bool) -> int:
    return DEVICES.get(name, (1, 1))[1 if quick else 0]
