"""StableHLO's check ops (`check.expect_eq`, `check.expect_close`, `check.expect_almost_eq`)
as CPU and CUDA kernels, so the StableHLO conformance suite runs with `xlaplug run` as it
stands, on either device.

Semantics are in xlaplug/conformance.py (from stablehlo's CheckOps).  A failed check raises
CheckFailure: `xlaplug run` exits 1 and names the elements that differ.  On CUDA a check
reads its two operands back to the host (a check's values leave the device, as results do);
`element_types` gives their HLO types, since bf16/f8 values arrive as float32 arrays and
ULP distances are counted in the declared type.
"""
import numpy as np

from xlaplug.runtime.conformance import DEFAULT_MAX_ULP, run_check
from xlaplug.hlo import dtypes as D
from xlaplug.plugin import Plugin

plugin = Plugin("stablehlo_check", version="1.0",
                description="StableHLO interpreter check ops (check.expect_*)")

_EXAMPLES = [(("f32[3,4]", "f32[3,4]"), {}), (("s32[5]", "s32[5]"), {})]


def _make(target):
    def kernel(actual, expected, *, max_ulp_difference=DEFAULT_MAX_ULP, **_ignored):
        run_check(target, actual, expected, max_ulp=int(max_ulp_difference))
    kernel.__name__ = target.replace(".", "_")
    return kernel


def _make_cuda(target):
    def kernel(actual, expected, *, element_types, max_ulp_difference=DEFAULT_MAX_ULP,
               **_ignored):
        host = [np.asarray(x.copy_to_host()).astype(D.to_dtype(t), copy=False)
                for x, t in zip((actual, expected), element_types)]
        run_check(target, *host, max_ulp=int(max_ulp_difference))
    kernel.__name__ = target.replace(".", "_") + "_cuda"
    return kernel


for _target in ("check.expect_eq", "check.expect_close", "check.expect_almost_eq"):
    plugin.shape(_target)(lambda a, b, **_: ())
    plugin.kernel(_target, device="cpu")(_make(_target))
    plugin.kernel(_target, device="cuda")(_make_cuda(_target))
