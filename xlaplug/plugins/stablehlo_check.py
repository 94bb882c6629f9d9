"""StableHLO's check ops (`check.expect_eq`, `check.expect_close`, `check.expect_almost_eq`)
as CPU kernels, so the StableHLO conformance suite runs with `xlaplug run` as it stands.

Semantics are in xlaplug/conformance.py (from stablehlo's CheckOps).  A failed check raises
CheckFailure: `xlaplug run` exits 1 and names the elements that differ.
"""
import numpy as np

from xlaplug.conformance import DEFAULT_MAX_ULP, run_check
from xlaplug.plugin import Plugin

plugin = Plugin("stablehlo_check", version="1.0",
                description="StableHLO interpreter check ops (check.expect_*)")

_EXAMPLES = [(("f32[3,4]", "f32[3,4]"), {}), (("s32[5]", "s32[5]"), {})]


def _make(target):
    def kernel(actual, expected, *, max_ulp_difference=DEFAULT_MAX_ULP, **_ignored):
        run_check(target, actual, expected, max_ulp=int(max_ulp_difference))
    kernel.__name__ = target.replace(".", "_")
    return kernel


for _target in ("check.expect_eq", "check.expect_close", "check.expect_almost_eq"):
    plugin.shape(_target)(lambda a, b, **_: ())
    plugin.kernel(_target, device="cpu")(_make(_target))


def _identical_inputs_pass():
    a = np.arange(4, dtype=np.float32)
    run_check("check.expect_close", a, a)
