"""xlaplug.jax.register: every bundled plugin's CPU kernel served inside XLA, checked against
its decomposition run by XLA; what is refused and why; the ABI's metadata stage and version
checks, driven with a synthetic call frame."""
import ctypes

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import xlaplug.jax as xj  # noqa: E402
from xlaplug.plugin import Plugin  # noqa: E402
from xlaplug.xla.ffi import COMPILED, NOT_SERVED, PYTHON, FfiError, abi, register_op  # noqa: E402
from xlaplug.xla.ffi.register import _TARGETS  # noqa: E402

pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def report():
    return xj.register()


def rms_norm(x, scale, epsilon):
    return jax.ffi.ffi_call("example.rms_norm", jax.ShapeDtypeStruct(x.shape, x.dtype))(
        x, scale, epsilon=epsilon)


def test_register_says_how_each_bundled_op_is_served(report):
    assert report["example.rms_norm"].how == COMPILED
    for op in ("check.expect_eq", "check.expect_close", "check.expect_almost_eq"):
        assert report[op].how == PYTHON and "not a numba @njit" in report[op].reason
    assert report["HorovodAllreduce"].how == NOT_SERVED
    assert "communicator" in report["HorovodAllreduce"].reason
    lapack = report["lapack_sgetrf_ffi"]   # jaxlib serves its own LAPACK targets
    assert lapack.how == NOT_SERVED and "registered it first" in lapack.reason
    assert "example.rms_norm" in report.served and "example.rms_norm" in str(report)
    again = xj.register()
    assert again["example.rms_norm"].how == COMPILED and not again["example.rms_norm"].new


@pytest.mark.parametrize("shape,dtype,eps", [((8, 64), np.float32, 1e-6),
                                             ((3, 5, 16), np.float32, 1e-3),
                                             ((4, 32), np.float64, 1e-5),
                                             ((7,), np.float32, 1e-6)])
def test_rms_norm_inside_xla_matches_its_decomposition_run_by_xla(report, shape, dtype, eps):
    python = _TARGETS["example.rms_norm"].handler.python
    calls = []
    python.run = lambda frame, run=type(python).run: (calls.append(1), run(python, frame))[1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    s = rng.standard_normal(shape[-1:]).astype(dtype)

    def f(x, s):
        return rms_norm(x, s, dtype(eps))
    with jax.enable_x64(dtype == np.float64):
        got = np.asarray(jax.jit(f)(x, s))
        decomposed = xj.check(f, x, s).xla[0]   # every plugin op decomposed, run on XLA:CPU
    assert got.dtype == dtype
    np.testing.assert_allclose(got, decomposed, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-6)
    # the examples' signatures (ranks 2 and 3) are compiled; rank 1 goes through Python
    assert calls == ([1] if len(shape) == 1 else [])


def expect(target, a, b, **attrs):
    return jax.ffi.ffi_call(target, (), has_side_effect=True)(a, b, **attrs)


def test_stablehlo_check_ops_pass_and_fail_inside_xla(report):
    a = jnp.arange(6, dtype=jnp.float32)
    jax.block_until_ready(jax.jit(lambda a: expect("check.expect_eq", a, a + 0))(a))
    near = jax.jit(lambda a: a * (1 + 1e-7))(a)     # 2 ULP off at [3]
    jax.block_until_ready(jax.jit(lambda a, b: expect("check.expect_close", a, b,
                                                      max_ulp_difference=4))(a, near))
    with pytest.raises(Exception, match=r"kernel for 'check.expect_close': "
                                        r"check.expect_close failed: 1 of 6 elements differ"):
        jax.block_until_ready(jax.jit(lambda a, b: expect("check.expect_close", a, b,
                                                          max_ulp_difference=1))(a, near))
    with pytest.raises(Exception, match=r"plugin 'stablehlo_check' kernel for "
                                        r"'check.expect_eq': check.expect_eq failed"):
        jax.block_until_ready(jax.jit(lambda a: expect("check.expect_eq", a, a + 1))(a))
    jax.block_until_ready(jax.jit(lambda a: expect("check.expect_eq", a, a * 1))(a))


def test_a_different_plugin_under_a_taken_target_is_an_error_naming_both(report):
    other = Plugin("impostor")

    @other.kernel("example.rms_norm")
    def kernel(x, scale, out, *, epsilon=1e-6):
        out[...] = x
    with pytest.raises(FfiError, match=r"'example.rms_norm' is already served by plugin "
                                       r"'example_rms_norm' .*plugin 'impostor'"):
        register_op("example.rms_norm", other.kernels[("example.rms_norm", "cpu")])


def test_versions_not_written_for_are_refused():
    abi.check_version((0, 3), "here")
    abi.check_version((0, 9), "here")
    for bad in ((1, 0), (0, 0)):
        with pytest.raises(FfiError, match=rf"XLA FFI API version {bad[0]}.{bad[1]} \(here\) "
                                           "is not one xlaplug's FFI handlers were written for"):
            abi.check_version(bad, "here")
    assert abi.header_version(jax.ffi.include_dir())[0] == abi.API_MAJOR


class FakeXla:
    """An XLA_FFI_Api of a given version whose XLA_FFI_Error_Create records the message,
    and a metadata-stage call frame pointing at it."""

    def __init__(self, major, minor, with_api=True):
        self.messages = []
        self.create = abi.ErrorCreate(self._create)
        self.api = (ctypes.c_int64 * 40)()
        self.api[4] = major | (minor << 32)          # api_version.{major,minor} at 32, 36
        self.api[6] = ctypes.cast(self.create, ctypes.c_void_p).value  # Error_Create at 48
        self.metadata = (ctypes.c_int64 * 6)()
        self.ext = (ctypes.c_int64 * 4)(32, abi.EXTENSION_METADATA, 0,
                                        ctypes.addressof(self.metadata))
        self.frame = abi.CallFrame(ctypes.sizeof(abi.CallFrame), ctypes.addressof(self.ext),
                                   ctypes.addressof(self.api) if with_api else None)

    def _create(self, args):
        self.messages.append(args.contents.message.decode())
        return 0x7E57

    def query(self, handler_address):
        return abi.HANDLER(handler_address)(ctypes.addressof(self.frame))

    @property
    def answered(self):
        m = self.metadata
        return (m[3] & 0xFFFFFFFF, m[3] >> 32, m[4] & 0xFFFFFFFF)  # major, minor, traits


@pytest.mark.parametrize("kind", ["compiled", "python"])
def test_metadata_stage_answers_our_version_and_refuses_an_unknown_one(report, kind):
    handler = _TARGETS["example.rms_norm"].handler
    address = handler.address if kind == "compiled" else handler.python.address
    for with_api in (True, False):
        xla = FakeXla(0, 3, with_api)
        assert xla.query(address) is None and xla.messages == []
        assert xla.answered == (abi.API_MAJOR, abi.API_MINOR_REPORTED, 0)
    xla = FakeXla(1, 0)
    assert xla.query(address) == 0x7E57
    assert xla.answered == (0, 0, 0)
    assert len(xla.messages) == 1 and "XLA FFI API version 1.0" in xla.messages[0]


def test_overhead_benchmark_runs_every_way_and_agrees_with_jnp():
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "ffi_overhead.py"),
                        "--check-only"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bench.axpb_compiled: compiled handler" in r.stdout
    assert "all ways agree with jnp" in r.stdout
