"""Which FFI targets XLA has registered for a plugin op: the one seam between
`xlaplug.jax.op` (which calls the kernel through `jax.ffi.ffi_call` only where XLA can serve
it) and `xlaplug.jax.register` (which registers each op's kernel under the op's name).
"""
from __future__ import annotations

# xlaplug's kernel devices -> jax platform names.
PLATFORMS = {"cpu": "cpu", "cuda": "cuda"}
XLA_PLATFORMS = {"cpu": "cpu", "cuda": "CUDA"}


def kernel_target(op: str, platform: str) -> str | None:
    """The FFI target serving `op`'s kernel on `platform` (an xlaplug device), or None when
    XLA has none registered.  The one seam to xlaplug.jax.register (issue 22): it registers
    each op's kernel under the op's name, which this then finds."""
    import jax
    from jaxlib import xla_client
    jax.devices()  # the backends register XLA's own targets when they start
    try:
        known = xla_client.custom_call_targets(XLA_PLATFORMS.get(platform, platform))
    except Exception:  # a platform jaxlib does not know: nothing is registered for it
        return None
    return op if op in known and op not in _jaxlib_own(platform) else None


def _jaxlib_own(platform: str) -> set[str]:
    """jaxlib's own LAPACK targets: the jax_lapack plugin's kernels stand in for them inside
    xlaplug, but jaxlib's handlers expect jax's column-major operand layouts and LAPACK set up
    by jax's own lowering -- an ffi_call of them from here is not that kernel (and crashes)."""
    if platform != "cpu":
        return set()
    try:
        from jaxlib import lapack
        return {r[0] for r in lapack.registrations().get("cpu", ())}
    except (ImportError, AttributeError):
        return set()
