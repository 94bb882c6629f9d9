"""The template for plugin authors: RMS normalisation as a custom op.

    y = x * rsqrt(mean(x * x, axis=-1) + epsilon) * scale

    %y = f32[8,512] custom-call(%x, %scale), custom_call_target="example.rms_norm",
         backend_config={epsilon = 1.000000e-06 : f32}

It gives all four pieces: a shape rule, a decomposition into core HLO (the portable
fallback, and the reference `check-plugins` compares the kernels with), a CPU kernel
(numba @njit: the interpreter calls it, and inside XLA a compiled FFI handler serves it
with no Python in the call) and a CUDA kernel (numba.cuda, one block per row).
"""
import numpy as np

from xlaplug.backends.cpu.jit_store import cached_njit
from xlaplug.hlo.errors import HloError
from xlaplug.plugin import Plugin

plugin = Plugin("example_rms_norm", version="1.0",
                description="RMS norm: the worked example of a plugin op")

OP = "example.rms_norm"
EXAMPLES = [(("f32[8,64]", "f32[64]"), {"epsilon": np.float32(1e-6)}),
            (("f32[3,5,16]", "f32[16]"), {"epsilon": np.float32(1e-3)}),
            (("f64[4,32]", "f64[32]"), {"epsilon": np.float64(1e-5)})]


@plugin.shape(OP, examples=EXAMPLES)
def rms_norm_shape(x, scale, *, epsilon=1e-6):
    if scale.rank != 1 or x.rank < 1 or scale.dims[0] != x.dims[-1]:
        raise HloError(f"{OP}: scale must be [{x.dims[-1] if x.rank else '?'}], got {scale}")
    if scale.element_type != x.element_type:
        raise HloError(f"{OP}: scale type {scale.element_type} != x type {x.element_type}")
    return x


@plugin.decomposition(OP)
def rms_norm_decomposed(b, x, scale, *, epsilon=1e-6):
    etype = x.shape.element_type
    n = x.shape.dims[-1]
    last = x.shape.rank - 1
    add = b.scalar_computation("rms_norm_add", "add", etype)
    sumsq = b.reduce(b.multiply(x, x), b.constant(0, x.dtype), [last], add)
    mean = b.divide(sumsq, b.constant(n, x.dtype))
    inv = b.rsqrt(b.add(mean, b.constant(epsilon, x.dtype)))
    keep = list(range(last))
    inv_b = b.broadcast(inv, x.shape.dims, keep)
    scale_b = b.broadcast(scale, x.shape.dims, [last])
    return b.multiply(b.multiply(x, inv_b), scale_b)


@plugin.kernel(OP, device="cpu", examples=EXAMPLES)
# numba's cache, in xlaplug's cache directory (in memory without one); lazy: numba is
# imported and the kernel compiled (or loaded) at its first call, not when the plugin loads
@cached_njit(lazy=True)
def rms_norm_cpu(x, scale, out, epsilon=1e-6):
    # An @njit kernel with no keyword-only parameters: inside XLA (xlaplug.jax.register) it
    # is served by a compiled FFI handler, compiled for each of EXAMPLES' signatures.
    n = x.shape[x.ndim - 1]
    for idx in np.ndindex(x.shape[:-1]):
        row, dst = x[idx], out[idx]
        acc = 0.0
        for j in range(n):
            acc += row[j] * row[j]
        inv = 1.0 / np.sqrt(acc / n + epsilon)
        for j in range(n):
            dst[j] = row[j] * inv * scale[j]


_CUDA_KERNEL = None


def _cuda_kernel():
    """Compiled on first use, so importing the plugin never needs a GPU."""
    global _CUDA_KERNEL, cuda
    if _CUDA_KERNEL is None:
        from numba import cuda  # a module global: numba's CUDA simulator swaps only globals

        @cuda.jit
        def rms_rows(x2, scale, eps, out2):
            # One block per row; threads stride over the row, then a shared-memory tree sum.
            r = cuda.blockIdx.x
            t = cuda.threadIdx.x
            nt = cuda.blockDim.x
            n = x2.shape[1]
            partial = cuda.shared.array(128, dtype=np.float64)
            acc = 0.0
            for j in range(t, n, nt):
                acc += x2[r, j] * x2[r, j]
            partial[t] = acc
            cuda.syncthreads()
            step = nt // 2
            while step > 0:
                if t < step:
                    partial[t] += partial[t + step]
                cuda.syncthreads()
                step //= 2
            inv = 1.0 / (partial[0] / n + eps) ** 0.5
            for j in range(t, n, nt):
                out2[r, j] = x2[r, j] * inv * scale[j]
        _CUDA_KERNEL = rms_rows
    return _CUDA_KERNEL


@plugin.kernel(OP, device="cuda", examples=EXAMPLES)
def rms_norm_cuda(x, scale, out, *, epsilon=1e-6):
    n = x.shape[x.ndim - 1]  # device-array shapes (and the simulator's) refuse negative indices
    rows = x.size // n
    x2 = x.reshape(rows, n)
    out2 = out.reshape(rows, n)
    _cuda_kernel()[rows, 128](x2, scale, float(epsilon), out2)
