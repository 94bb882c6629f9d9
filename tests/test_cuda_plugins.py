"""Plugin kernels for device "cuda" receive device arrays (and device outputs) in a run."""
from pathlib import Path

import numpy as np
from numba import cuda  # module level: the simulator swaps module globals only

from xlaplug.runtime.driver import compile_module, load_module
from xlaplug.plugin import Session, load_plugins
from xlaplug.runtime.runner import execute

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
        seen.append([cuda.is_cuda_array(a) if hasattr(cuda, "is_cuda_array") else
                     type(a).__name__ for a in arrays])
        return original(*arrays, **kw)

    entry.fn = spy
    try:
        outs = {}
        for device in ("cpu", "cuda"):
            session = Session(reg, device=device)
            m = load_module(str(EXAMPLE))
            compile_module(m, session)
            outs[device] = execute(m, [x, s], session).outputs[0]
    finally:
        entry.fn = original
    np.testing.assert_allclose(outs["cuda"], outs["cpu"], rtol=2e-6, atol=1e-6)
    assert len(seen) == 1 and len(seen[0]) == 3  # x, scale, and the preallocated output
    # Device arrays: DeviceNDArray on a GPU, FakeCUDAArray under the simulator.
    assert all(v is True or "Device" in str(v) or "CUDAArray" in str(v) for v in seen[0]), seen


_BF16_CALL = """HloModule m
ENTRY e {
  x = bf16[5] parameter(0)
  ROOT y = bf16[5] custom-call(x), custom_call_target="acme.third"
}
"""


def _third_plugin(seen):
    from xlaplug.plugin import Plugin
    plugin = Plugin("acme_third")
    plugin.shape("acme.third")(lambda x, **_: x)

    @plugin.kernel("acme.third", device="cpu")
    def third_cpu(x, out, *, divisor=3.0):
        out[...] = (x.astype(np.float32) / np.float32(divisor)).astype(out.dtype)

    @plugin.kernel("acme.third", device="cuda")
    def third_cuda(x, out, *, element_types, divisor=3.0):
        seen.append((element_types, np.dtype(x.dtype), divisor))

        @cuda.jit
        def k(a, o, d):
            i = cuda.grid(1)
            if i < o.size:
                o[i] = a[i] / d  # float32 arithmetic on the values of bf16 operands
        k[1, 32](x, out, np.float32(divisor))
    return plugin


def test_cuda_plugin_kernel_with_narrow_types():
    """bf16 reaches a CUDA plugin kernel as float32 values; `element_types` names the HLO
    types; the kernel's float32 results are rounded to bf16 after it; a Session's
    attr_defaults fill an attribute the instruction does not set."""
    import ml_dtypes
    from xlaplug.hlo import parse_module
    from xlaplug.plugin import Registry
    seen = []
    reg = Registry()
    reg.add(_third_plugin(seen))
    x = np.array([1.0, 2.0, -7.5, 100.0, 0.3], ml_dtypes.bfloat16)
    outs = {}
    for device in ("cpu", "cuda"):
        session = Session(reg, device=device, attr_defaults={"divisor": 7.0})
        m = parse_module(_BF16_CALL)
        compile_module(m, session)
        outs[device] = execute(m, [x], session).outputs[0]
    assert seen == [(("bf16", "bf16"), np.dtype(np.float32), 7.0)]
    assert outs["cuda"].dtype == ml_dtypes.bfloat16
    want = (x.astype(np.float32) / np.float32(7.0)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(outs["cuda"].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(outs["cpu"].view(np.uint16), want.view(np.uint16))
