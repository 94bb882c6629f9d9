"""Plugin kernels for device "cuda" receive device arrays (and device outputs) in a run."""
from pathlib import Path

import numpy as np

from xlaplug.driver import compile_module, load_module
from xlaplug.plugin import load_plugins
from xlaplug.plugin_runtime import Session, activate
from xlaplug.runner import execute

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rms_norm.hlo"


def test_rms_norm_cuda_kernel_in_a_run_matches_cpu():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    s = rng.standard_normal(64).astype(np.float32)
    seen = []
    reg = load_plugins(entry_points=False)
    entry = reg.kernels[("example.rms_norm", "cuda")]
    original = entry.fn

    def spy(*arrays, **kw):
        from numba import cuda
        seen.append([cuda.is_cuda_array(a) if hasattr(cuda, "is_cuda_array") else
                     type(a).__name__ for a in arrays])
        return original(*arrays, **kw)

    entry.fn = spy
    try:
        outs = {}
        for device in ("cpu", "cuda"):
            activate(Session(reg, device=device))
            m = load_module(str(EXAMPLE))
            compile_module(m, None)
            outs[device] = execute(m, [x, s], device=device).outputs[0]
    finally:
        entry.fn = original
        activate(Session())
    np.testing.assert_allclose(outs["cuda"], outs["cpu"], rtol=2e-6, atol=1e-6)
    assert len(seen) == 1 and len(seen[0]) == 3  # x, scale, and the preallocated output
    # Device arrays: DeviceNDArray on a GPU, FakeCUDAArray under the simulator.
    assert all(v is True or "Device" in str(v) or "CUDAArray" in str(v) for v in seen[0]), seen
