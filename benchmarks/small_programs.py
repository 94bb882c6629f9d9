"""The programs of small_models.py: each `name(rng) -> (f, args)`, f a jax function of flat
numpy arrays (so the lowered module's parameters are the arrays, in order).  Layers and
optimizers are written in jax.numpy as flax and optax compute them (neither is a
dependency)."""
from __future__ import annotations

import numpy as np


def _normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _xent(logits, labels):
    import jax
    import jax.numpy as jnp
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def mlp_sgd(rng):
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        w1, b1, w2, b2 = params
        return _xent(jnp.maximum(x @ w1 + b1, 0.0) @ w2 + b2, y)

    def step(w1, b1, w2, b2, x, y):
        params = (w1, b1, w2, b2)
        val, g = jax.value_and_grad(loss)(params, x, y)
        return (val, *(p - 0.1 * d for p, d in zip(params, g)))

    args = [_normal(rng, 64, 128, scale=64 ** -0.5), np.zeros(128, np.float32),
            _normal(rng, 128, 10, scale=128 ** -0.5), np.zeros(10, np.float32),
            _normal(rng, 32, 64), rng.integers(0, 10, 32).astype(np.int32)]
    return step, args


def _conv(x, w):
    from jax import lax
    return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _batch_norm(x, scale, bias):
    import jax.numpy as jnp
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
    return (x - mean) * (scale / jnp.sqrt(var + 1e-5)) + bias


def cnn_bn(rng):
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        k1, s1, o1, k2, s2, o2, wd, bd = params
        h = jnp.maximum(_batch_norm(_conv(x, k1), s1, o1), 0.0)
        h = jnp.maximum(_batch_norm(_conv(h, k2), s2, o2), 0.0)
        return _xent(jnp.mean(h, axis=(1, 2)) @ wd + bd, y)

    def step(*a):
        params, (x, y) = a[:8], a[8:]
        val, g = jax.value_and_grad(loss)(params, x, y)
        return (val, *(p - 0.05 * d for p, d in zip(params, g)))

    # Batch norm's offsets start away from 0 (as after a few steps): an offset of 0 would
    # make its updated value -lr * its gradient, a sum over the batch that cancels to 1e-4
    # of its terms, where xlaplug's row-major fold (as the HloEvaluator's) is 4e-5 off f64
    # and XLA's vectorized sum 2e-6 -- beyond the check's tolerance for a leaf of its own.
    ones = np.ones(16, np.float32)
    args = [_normal(rng, 3, 3, 3, 16, scale=27 ** -0.5), ones, _normal(rng, 16, scale=0.1),
            _normal(rng, 3, 3, 16, 16, scale=144 ** -0.5), ones.copy(),
            _normal(rng, 16, scale=0.1),
            _normal(rng, 16, 10, scale=0.25), np.zeros(10, np.float32),
            _normal(rng, 8, 16, 16, 3), rng.integers(0, 10, 8).astype(np.int32)]
    return step, args


def _layer_norm(x, g, b):
    import jax.numpy as jnp
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * (g / jnp.sqrt(var + 1e-6)) + b


def transformer(rng):
    import jax
    import jax.numpy as jnp
    batch, t, d, heads = 4, 32, 64, 2

    def block(x, g1, b1, wqkv, wo, g2, b2, w1, w2):
        h = _layer_norm(x, g1, b1)
        q, k, v = jnp.split(h @ wqkv, 3, axis=-1)
        split = lambda z: z.reshape(batch, t, heads, d // heads).transpose(0, 2, 1, 3)
        q, k, v = split(q), split(k), split(v)
        s = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(d // heads))
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
        a = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(batch, t, d)
        x = x + a @ wo
        return x + jax.nn.gelu(_layer_norm(x, g2, b2) @ w1) @ w2

    args = [_normal(rng, batch, t, d), np.ones(d, np.float32), np.zeros(d, np.float32),
            _normal(rng, d, 3 * d, scale=d ** -0.5), _normal(rng, d, d, scale=d ** -0.5),
            np.ones(d, np.float32), np.zeros(d, np.float32),
            _normal(rng, d, 4 * d, scale=d ** -0.5), _normal(rng, 4 * d, d, scale=0.5 / d)]
    return block, args


def adam(rng):
    import jax.numpy as jnp
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    shapes = [(64, 128), (128,), (128, 10), (10,)]

    def step(count, *a):  # optax.adam: bias-corrected moments, update -lr * m / (sqrt(v) + eps)
        n = len(shapes)
        params, grads, ms, vs = a[:n], a[n:2 * n], a[2 * n:3 * n], a[3 * n:]
        c = count + 1
        out_p, out_m, out_v = [], [], []
        for p, g, m, v in zip(params, grads, ms, vs):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * jnp.square(g)
            mh = m / (1 - b1 ** c.astype(jnp.float32))
            vh = v / (1 - b2 ** c.astype(jnp.float32))
            out_p.append(p - lr * mh / (jnp.sqrt(vh) + eps))
            out_m.append(m)
            out_v.append(v)
        return (c, *out_p, *out_m, *out_v)

    args = [np.int32(3)]
    for scale in (1.0, 0.1, 0.01):
        args += [_normal(rng, *s, scale=scale) for s in shapes]
    args += [np.abs(_normal(rng, *s, scale=1e-4)) for s in shapes]
    return step, args


def lstm_scan(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def run(h0, c0, xs, wx, wh, b):
        def cell(carry, x):
            h, c = carry
            z = x @ wx + h @ wh + b
            i, f, g, o = jnp.split(z, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        (h, c), hs = lax.scan(cell, (h0, c0), xs)
        return h, c, hs

    n, i, hd = 8, 32, 64
    return run, [_normal(rng, n, hd), _normal(rng, n, hd), _normal(rng, 32, n, i),
                 _normal(rng, i, 4 * hd, scale=i ** -0.5),
                 _normal(rng, hd, 4 * hd, scale=hd ** -0.5), np.zeros(4 * hd, np.float32)]


def gru_scan(rng):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def run(h0, xs, wx, wh, b):  # flax.linen.GRUCell's gates
        def cell(h, x):
            xr, xz, xn = jnp.split(x @ wx + b, 3, axis=-1)
            hr, hz, hn = jnp.split(h @ wh, 3, axis=-1)
            r = jax.nn.sigmoid(xr + hr)
            z = jax.nn.sigmoid(xz + hz)
            n = jnp.tanh(xn + r * hn)
            h = (1.0 - z) * n + z * h
            return h, h
        return lax.scan(cell, h0, xs)

    n, i, hd = 8, 32, 64
    return run, [_normal(rng, n, hd), _normal(rng, 32, n, i),
                 _normal(rng, i, 3 * hd, scale=i ** -0.5),
                 _normal(rng, hd, 3 * hd, scale=hd ** -0.5), np.zeros(3 * hd, np.float32)]


def sort_topk(rng):
    from jax import lax
    import jax.numpy as jnp

    def f(x, y):
        vals, idx = lax.top_k(y, 8)
        return jnp.sort(x), vals, idx

    return f, [_normal(rng, 4096), _normal(rng, 32, 256)]


def gather_scatter(rng):
    def f(table, ids, rows, dst):
        emb = table[ids]                       # gather of rows
        return emb, table.at[dst].add(rows)    # scatter-add of rows

    return f, [_normal(rng, 1000, 64), rng.integers(0, 1000, 256).astype(np.int32),
               _normal(rng, 256, 64), rng.integers(0, 1000, 256).astype(np.int32)]


PROGRAMS = {"mlp_sgd": mlp_sgd, "cnn_bn": cnn_bn, "transformer": transformer, "adam": adam,
            "lstm_scan": lstm_scan, "gru_scan": gru_scan, "sort_topk": sort_topk,
            "gather_scatter": gather_scatter}
