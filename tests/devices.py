"""One test, every device, each device with its own oracle.

A kernel test is parametrized by `device` (the `DEVICES` params; the cuda one carries the
`cuda` marker, so `-m "not cuda"` leaves it out) and checks one case table on both:

* cpu:  xlaplug's CPU backend against jax / XLA:CPU (`oracle.check_against_jax`);
* cuda: xlaplug's CUDA backend (numba's simulator unless NUMBA_ENABLE_CUDASIM=0, see
        conftest.py) against the CPU backend on the same HLO text -- the CPU backend being
        the one verified against XLA.  Shapes stay small: the simulator runs every GPU
        thread as a Python thread.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from oracle import check_against_jax, hlo_text, leaves

DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]

# Decorator: run the test once per device (`device` argument).
on_each_device = pytest.mark.parametrize("device", DEVICES)


def assert_same_bits(got, want, what=""):
    """Leaf by leaf: same dtype, shape and bits (floats: NaN payloads and -0.0 included)."""
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), f"{what}: {len(g)} results, the cpu has {len(w)}"
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.dtype == b.dtype, f"{what}[{i}]: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{what}[{i}]: shape {a.shape} != {b.shape}"
        if a.dtype.kind not in "biu":  # floats, complex, bf16, f8, int4: the bit patterns
            a = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            b = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
        np.testing.assert_array_equal(a, b, err_msg=f"{what}[{i}]")


def cuda_against_cpu(text: str, args, compare=assert_same_bits, what: str = ""):
    """Runs HLO text on cuda and on cpu; `compare(cuda result, cpu result, what)`; returns the
    cuda result."""
    from xlaplug.runtime.executor import run_module
    from xlaplug.hlo.text.parser import parse_module
    args = [np.asarray(a) for a in args]
    with np.errstate(all="ignore"):
        want = run_module(parse_module(text), list(args), device="cpu")
    got = run_module(parse_module(text), list(args), device="cuda")
    compare(got, want, what or text.splitlines()[0][:60])
    return got


def check_on(device, f, args, compare, x64=False, modes=("lowered", "compiled"),
             keep_unused=False, strip_tables=False, expect_op=None,
             cuda_compare=assert_same_bits):
    """f lowered by jax (each HLO form of `modes`), run on `device` and judged by that
    device's oracle: on cpu `compare(got, jax's result, mode)`, on cuda
    `cuda_compare(got, the cpu's result, mode)`."""
    if device == "cpu":
        check_against_jax(f, args, compare, x64=x64, modes=modes, keep_unused=keep_unused,
                          strip_tables=strip_tables, expect_op=expect_op)
        return
    import jax
    with jax.enable_x64(True) if x64 else contextlib.nullcontext():
        lowered = jax.jit(f, keep_unused=keep_unused).lower(*args)
        for mode in modes:
            text = hlo_text(lowered, mode, strip_tables)
            if expect_op is not None and mode == "lowered":
                assert f" {expect_op}(" in text, f"no {expect_op} in the lowered HLO"
            cuda_against_cpu(text, args, cuda_compare, mode)


def device_cases(values, cuda_gaps=None):
    """`device` x `values` params (a value may be a tuple of several arguments).  The
    values in `cuda_gaps` ({value: reason}) are cases the CUDA backend refuses today: on
    cuda they run as strict xfails with that reason, so the case stays in the table and a
    fix shows up as an unexpected pass."""
    cuda_gaps = cuda_gaps or {}
    out = []
    for v in values:
        args = v if isinstance(v, tuple) else (v,)
        vid = "-".join(str(a) for a in args)
        out.append(pytest.param("cpu", *args, id=f"cpu-{vid}"))
        marks = [pytest.mark.cuda]
        if v in cuda_gaps:
            marks.append(pytest.mark.xfail(strict=True, reason=cuda_gaps[v]))
        out.append(pytest.param("cuda", *args, id=f"cuda-{vid}", marks=marks))
    return out
