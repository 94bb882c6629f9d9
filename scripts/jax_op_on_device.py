"""xlaplug.jax.op's decomposition path on the default jax backend (XLA:TPU on the device
machine): the bundled RMS norm and a swish plugin op under jit, grad and vmap, against the
same math written in jnp on the same backend.  Prints one line per check; exits 1 on any
mismatch.

    python scripts/jax_op_on_device.py [--expect-platform tpu]
"""
from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

import xlaplug.jax
from xlaplug.plugin import Plugin


def swish_plugin() -> Plugin:
    p = Plugin("acme_device", version="0")
    p.shape("acme.swish")(lambda x, *, beta=1.0: x)

    @p.decomposition("acme.swish")
    def swish(b, x, *, beta=1.0):
        return b.multiply(x, b.logistic(b.multiply(x, b.constant(beta, x.dtype))))
    return p


def rms_math(x, s, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * s


def main() -> int:
    platform = jax.default_backend()
    expect = sys.argv[sys.argv.index("--expect-platform") + 1] if "--expect-platform" in \
        sys.argv else None
    print(f"backend: {platform} ({jax.devices()[0].device_kind})")
    if expect and platform != expect:
        print(f"FAIL: expected the {expect} backend")
        return 1
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 256)), jnp.float32)
    s = jnp.asarray(rng.standard_normal(256), jnp.float32)
    rms = xlaplug.jax.op("example.rms_norm", prefer="decomposition")
    swish = xlaplug.jax.op("acme.swish", plugins=[swish_plugin()])
    cases = {
        "rms_norm jit": (jax.jit(lambda x, s: rms(x, s, epsilon=1e-5)),
                         jax.jit(lambda x, s: rms_math(x, s, 1e-5)), (x, s)),
        "rms_norm grad": (jax.jit(jax.grad(lambda x, s: jnp.sum(jnp.sin(rms(x, s, epsilon=1e-5))),
                                           argnums=(0, 1))),
                          jax.jit(jax.grad(lambda x, s: jnp.sum(jnp.sin(rms_math(x, s, 1e-5))),
                                           argnums=(0, 1))), (x, s)),
        "rms_norm vmap": (jax.jit(jax.vmap(lambda x: rms(x, s, epsilon=1e-5))),
                          jax.jit(jax.vmap(lambda x: rms_math(x, s, 1e-5))),
                          (x.reshape(8, 8, 256),)),
        "swish jit": (jax.jit(lambda x: swish(x, beta=1.5)),
                      jax.jit(lambda x: x * jax.nn.sigmoid(1.5 * x)), (x,)),
        "swish grad": (jax.jit(jax.grad(lambda x: jnp.sum(swish(x, beta=1.5)))),
                       jax.jit(jax.grad(lambda x: jnp.sum(x * jax.nn.sigmoid(1.5 * x)))), (x,)),
        "swish vmap": (jax.jit(jax.vmap(lambda x: swish(x, beta=1.5))),
                       jax.jit(jax.vmap(lambda x: x * jax.nn.sigmoid(1.5 * x))), (x,)),
    }
    bad = 0
    for name, (ours, theirs, args) in cases.items():
        got, want = jax.tree_util.tree_leaves(ours(*args)), jax.tree_util.tree_leaves(theirs(*args))
        err = max(float(jnp.max(jnp.abs(g - w))) for g, w in zip(got, want))
        scale = max(float(jnp.max(jnp.abs(w))) for w in want)
        ok = all(g.shape == w.shape and g.dtype == w.dtype for g, w in zip(got, want)) and \
            err <= 1e-5 * max(scale, 1.0)
        where = {str(next(iter(g.devices())).platform) for g in got}
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs err {err:.3g} (max |value| "
              f"{scale:.3g}) on {','.join(sorted(where))}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
