"""The model workloads of run.py: a transformer block (forward in f32 and bf16, and its training
step), a small conv net's training step, and a data-parallel MLP training step on D devices.

Each is written once in jax over a pytree of parameters; `flat` turns it into a function of a
flat list of arrays (the lowered HLO's parameters, in jax.tree.leaves order) whose outputs are
the leaves of its result, so run.py times and checks every output.  numpy versions exist where
they are the same computation done op by op (the f32 forward, the data-parallel step on one
device); numpy has no bf16 matmul and no autodiff, so the other rows have no numpy column.

Sizes (full / --quick):
  transformer_f32, transformer_bf16   pre-LN block, causal attention, tanh-GELU MLP 4x:
                                      batch 8, 128 tokens, d_model 256, 4 heads / 2x16x32, 4 heads
  transformer_train   jax.value_and_grad of mean(block(x)^2) and an SGD update, f32
  convnet_train       conv3x3 3->32 relu, conv3x3 stride 2 32->64 relu, mean pool, dense 10,
                      softmax cross-entropy, SGD: NHWC 16x32x32x3 / 2x8x8x3 (channels 4, 8)
  data_parallel       MLP tanh(x @ w1) @ w2 256x512x64, MSE, grads pmean'd over D = 4 devices
                      (batch 64 per device), SGD: XLA's partitioned module, the devices as
                      `xlaplug run` runs them / 32x64x16, batch 8, D = 2
"""
from __future__ import annotations

import numpy as np

MODELS = ["transformer_f32", "transformer_bf16", "transformer_train", "convnet_train",
          "data_parallel"]
DEVICES = {"data_parallel": (4, 2)}  # (full, --quick); the others run on one device


class Workload:
    """What run.py needs of one workload: `jf` (jax, flat arrays in, a pytree out), `nf`
    (numpy, the same, or None), `args` (flat numpy arrays), `dtype` ("f32" or "bf16": the
    tolerance), `devices` (> 1: run on that many devices from XLA's partitioned module)."""

    def __init__(self, desc, jf, nf, args, dtype="f32", devices=1):
        self.desc, self.jf, self.nf, self.args = desc, jf, nf, args
        self.dtype, self.devices = dtype, devices


def flat(f, tree):
    """(g, leaves): g(*leaves) == f(*tree); the leaves are the lowered module's parameters."""
    import jax
    leaves, treedef = jax.tree.flatten(tree)
    return (lambda *xs: f(*jax.tree.unflatten(treedef, list(xs)))), leaves


# ---- transformer block -------------------------------------------------------------------

def _block_params(rng, d, dtype):
    def n(*shape, scale):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    one, zero = np.ones(d, dtype), np.zeros(d, dtype)
    return {"ln1_g": one, "ln1_b": zero, "wq": n(d, d, scale=d ** -0.5),
            "wk": n(d, d, scale=d ** -0.5), "wv": n(d, d, scale=d ** -0.5),
            "wo": n(d, d, scale=d ** -0.5), "ln2_g": one.copy(), "ln2_b": zero.copy(),
            "w1": n(d, 4 * d, scale=d ** -0.5), "b1": n(4 * d, scale=0.1),
            "w2": n(4 * d, d, scale=(4 * d) ** -0.5), "b2": n(d, scale=0.1)}


def _jax_block(heads):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def layernorm(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5) * g + b

    def block(p, x):
        bsz, t, d = x.shape
        hd = d // heads
        h = layernorm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = ((h @ p[w]).reshape(bsz, t, heads, hd) for w in ("wq", "wk", "wv"))
        s = jnp.einsum("bthd,bshd->bhts", q, k) * (hd ** -0.5)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.finfo(x.dtype).min)
        o = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, axis=-1), v)
        x = x + o.reshape(bsz, t, d) @ p["wo"]
        h = layernorm(x, p["ln2_g"], p["ln2_b"])
        return x + jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return block


def _numpy_block(heads):
    def layernorm(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + np.float32(1e-5)) * g + b

    def gelu(x):  # jax.nn.gelu's default, the tanh approximation
        c = np.float32(np.sqrt(2 / np.pi))
        return np.float32(0.5) * x * (1 + np.tanh(c * (x + np.float32(0.044715) * x ** 3)))

    def block(p, x):
        bsz, t, d = x.shape
        hd = d // heads
        h = layernorm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = ((h @ p[w]).reshape(bsz, t, heads, hd).transpose(0, 2, 1, 3)
                   for w in ("wq", "wk", "wv"))
        s = q @ k.transpose(0, 1, 3, 2) * np.float32(hd ** -0.5)
        s = np.where(np.tril(np.ones((t, t), bool)), s, np.finfo(np.float32).min)
        e = np.exp(s - s.max(-1, keepdims=True))
        o = (e / e.sum(-1, keepdims=True)) @ v
        x = x + o.transpose(0, 2, 1, 3).reshape(bsz, t, d) @ p["wo"]
        h = layernorm(x, p["ln2_g"], p["ln2_b"])
        return x + gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return block


def transformer(quick, rng, dtype_name, train):
    import jax
    import jax.numpy as jnp
    bsz, t, d, heads = (2, 16, 32, 4) if quick else (8, 128, 256, 4)
    dtype = np.float32
    if dtype_name == "bf16":
        import ml_dtypes
        dtype = ml_dtypes.bfloat16
    p = _block_params(rng, d, dtype)
    x = rng.standard_normal((bsz, t, d)).astype(dtype)
    block = _jax_block(heads)
    what = f"batch {bsz}, {t} tokens, d {d}, {heads} heads, MLP {4 * d}"
    if not train:
        jf, args = flat(block, (p, x))
        nf = None
        if dtype_name == "f32":
            nf = flat(_numpy_block(heads), (p, x))[0]
        return Workload(f"pre-LN block {dtype_name}: {what}", jf, nf, args, dtype_name)

    def step(p, x):
        loss, g = jax.value_and_grad(lambda p: jnp.mean(block(p, x) ** 2))(p)
        return jax.tree.map(lambda w, dw: w - 0.01 * dw, p, g), loss
    jf, args = flat(step, (p, x))
    return Workload(f"block grad + SGD f32: {what}", jf, None, args)


# ---- conv net training step --------------------------------------------------------------

def convnet(quick, rng):
    import jax
    import jax.numpy as jnp
    from jax import lax
    n, hw, c1, c2, k = (2, 8, 4, 8, 10) if quick else (16, 32, 32, 64, 10)
    dn = ("NHWC", "HWIO", "NHWC")

    def logits(p, x):
        h = jax.nn.relu(lax.conv_general_dilated(x, p["k1"], (1, 1), "SAME",
                                                 dimension_numbers=dn) + p["c1"])
        h = jax.nn.relu(lax.conv_general_dilated(h, p["k2"], (2, 2), "SAME",
                                                 dimension_numbers=dn) + p["c2"])
        return h.mean(axis=(1, 2)) @ p["w"] + p["b"]

    def step(p, x, y):
        def loss(p):
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits(p, x)) * jax.nn.one_hot(y, k),
                                     -1))
        value, g = jax.value_and_grad(loss)(p)
        return jax.tree.map(lambda w, dw: w - 0.1 * dw, p, g), value

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    p = {"k1": normal(3, 3, 3, c1, scale=27 ** -0.5), "c1": np.zeros(c1, np.float32),
         "k2": normal(3, 3, c1, c2, scale=(9 * c1) ** -0.5), "c2": np.zeros(c2, np.float32),
         "w": normal(c2, k, scale=c2 ** -0.5), "b": np.zeros(k, np.float32)}
    x, y = normal(n, hw, hw, 3), rng.integers(0, k, n).astype(np.int32)
    jf, args = flat(step, (p, x, y))
    return Workload(f"NHWC {n}x{hw}x{hw}x3, conv {c1}, conv/2 {c2}, pool, dense {k}; "
                    "grad + SGD", jf, None, args)


# ---- data-parallel training step ---------------------------------------------------------

def data_parallel(quick, rng, devices):
    """shard_map over `devices` host devices (run.py's worker process sets XLA's device
    count): grads of each device's batch, pmean, SGD, as benchmarks/collectives.py's row."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map
    d_in, hid, d_out, per = (32, 64, 16, 8) if quick else (256, 512, 64, 64)
    mesh = Mesh(np.array(jax.devices()[:devices]), ("x",))

    def loss(w1, w2, x, y):
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    def step(w1, w2, x, y):
        g = jax.grad(loss, argnums=(0, 1))(w1, w2, x, y)
        g = jax.tree.map(lambda t: jax.lax.pmean(t, "x"), g)
        return w1 - 0.1 * g[0], w2 - 0.1 * g[1]
    jf = shard_map(step, mesh=mesh, in_specs=(P(), P(), P("x"), P("x")),
                   out_specs=(P(), P()), check_vma=False)

    def nf(w1, w2, x, y):  # the same step on one device: the mean over the whole batch
        h = np.tanh(x @ w1)
        dout = (h @ w2 - y) * np.float32(2 / y.size)
        dh = (dout @ w2.T) * (1 - h * h)
        return w1 - np.float32(0.1) * (x.T @ dh), w2 - np.float32(0.1) * (h.T @ dout)
    w1 = (rng.standard_normal((d_in, hid)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((hid, d_out)) * 0.1).astype(np.float32)
    x = rng.standard_normal((per * devices, d_in)).astype(np.float32)
    y = rng.standard_normal((per * devices, d_out)).astype(np.float32)
    return Workload(f"MLP {d_in}x{hid}x{d_out}, batch {per}/device, D={devices}: grads, "
                    "pmean, SGD", jf, nf, [w1, w2, x, y], "f32", devices)


def make_model(name, quick, rng):
    if name.startswith("transformer_"):
        kind = name.split("_", 1)[1]
        return transformer(quick, rng, "f32" if kind == "train" else kind, kind == "train")
    if name == "convnet_train":
        return convnet(quick, rng)
    if name == "data_parallel":
        return data_parallel(quick, rng, DEVICES[name][1 if quick else 0])
    raise ValueError(name)
