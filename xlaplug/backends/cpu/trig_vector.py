"""Where f32 sines and cosines run as vector code instead of libm calls, and the check that
allows it in this process.

The SCALAR_OPS templates call `_xsin32` / `_xcos32`: the process's sinf / cosf, as XLA:CPU
calls them (common/scalar_libm.py).  glibc's FMA sinf written out (same module) gives the
same bits as vector code, in two forms:

  * `_xsin32v`, every case of glibc's computed and one selected: a constant cost an
    element, which wins in long loops (the per-op kernel, f32[4M] sine: 6.7 ms against
    sinf's 29);
  * `_xsin32m`, glibc's result for |x| < 120 only (one reduction step, no 4/pi table): a
    loop computes it for every element and notes any element outside (`_xtrig_far`); if
    there is one, the loop runs again with the libm calls.  An element loop of a compiled
    while (loop_emitters.outline) takes this form at any length: the benchmark's 16 sines
    and cosines a step, 0.8 ns an element against sincosf's 2.5 (CPU time, 2026-12-06).

Both are glibc 2.28+'s FMA variant; the process's libm may be another (glibc without FMA
hardware, musl, macOS's), whose bits XLA would give.  So `vector_trig_ok` compares both
forms -- in the very loop shape `far_loop` writes -- with the libm calls on a fixed set of
inputs (both signs, every range and switch point of glibc's sinf, large arguments of the
4/pi reduction, inf, NaN, subnormals), once per process; where any bit differs, the libm
calls stay.
"""
from __future__ import annotations

import functools
import re

import numpy as np

_LIBM_CALL = re.compile(r"\b_x(sin|cos)32\(")
# From this many elements a per-op kernel or fused loop takes the `_xsin32v` form.
LONG_LOOP = 4096


def _calls(line: str) -> list[tuple[int, int]]:
    """(start, end) of each `_xsin32(...)` / `_xcos32(...)` call's argument in `line`."""
    out = []
    for m in _LIBM_CALL.finditer(line):
        depth, k = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(line[k], 0)
            k += 1
        out.append((m.end(), k - 1))
    return out


def _stored(block: list[str]) -> set[str]:
    return {m.group(1) for ln in block for m in re.finditer(r"^\s*(\w+)\[[^\]]*\] = ", ln)}


def far_loop(block: list[str]) -> list[str] | None:
    """An element loop's lines (a `for` line, its body indented under it) rewritten to the
    `_xsin32m` form with a libm rerun (module docstring); None when it calls no sine or
    cosine, or reads an array it writes (a rerun would read its own results)."""
    if not any(_calls(ln) for ln in block):
        return None
    stored, text = _stored(block), "\n".join(re.sub(r"^\s*\w+\[[^\]]*\] = ", "", ln)
                                             for ln in block)
    if any(re.search(rf"\b{a}\[", text) for a in stored):
        return None
    fast, seen = [], set()
    for ln in block:
        pad = ln[:len(ln) - len(ln.lstrip())]
        fast.append(_LIBM_CALL.sub(lambda m: f"_x{m.group(1)}32m(", ln))
        for arg in dict.fromkeys(ln[a:b] for a, b in _calls(ln)):
            if arg not in seen:  # (a sine and a cosine of one value: one test)
                seen.add(arg)
                fast.append(f"{pad}far |= _xtrig_far({arg})")
    return ["far = False", *fast, "if far:", *("    " + ln for ln in block)]


def long_loop(src: str) -> str:
    """`src` (a long loop's source) with its sine and cosine calls in the `_xsin32v` form,
    where this process allows it."""
    if not _LIBM_CALL.search(src) or not vector_trig_ok():
        return src
    return _LIBM_CALL.sub(lambda m: f"_x{m.group(1)}32v(", src)


def check_inputs() -> np.ndarray:
    """The fixed inputs of the check: every 2^19 + 3rd f32 bit pattern (8,000, across both
    signs and every exponent: far ones take the 4/pi reduction), the 96 patterns around
    each of glibc's switch points (2^-12, 0.75, 120, the largest finite), the f32 nearest
    to k pi/2 (the reduction's hardest cases), 0, -0, subnormals, inf, NaN."""
    every = np.arange(0, 1 << 32, (1 << 19) + 3, dtype=np.uint64).astype(np.uint32)
    near = [np.arange(b - 48, b + 48, dtype=np.uint64).astype(np.uint32) | s
            for b in (0x39800000, 0x3F400000, 0x42F00000, 0x7F7FFF80) for s in (0, 1 << 31)]
    k = np.arange(1, 400, dtype=np.float64)
    halfpi = np.concatenate([k, k * 1e3, k * 1e6]) * (np.pi / 2)
    special = np.array([0, 0x80000000, 1, 0x807FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000,
                        0x7FA00001], np.uint32)
    return np.concatenate([every, *near, halfpi.astype(np.float32).view(np.uint32),
                           special]).view(np.float32)


def _check_source() -> str:
    """Three loops over x: the libm calls, the `_xsin32v` form, `far_loop`'s form."""
    libm = ["for o in range(x.shape[0]):", "    s_a = _xsin32(x[o])", "    s_b = _xcos32(x[o])",
            "    a[o] = s_a", "    b[o] = s_b"]
    lines = ["def check(x, a, b, c, d, e, f):", *("    " + ln for ln in libm)]
    lines += ["    " + _LIBM_CALL.sub(lambda m: f"_x{m.group(1)}32v(", ln)
              .replace("a[o]", "c[o]").replace("b[o]", "d[o]") for ln in libm]
    far = far_loop([ln.replace("a[o]", "e[o]").replace("b[o]", "f[o]") for ln in libm])
    return "\n".join(lines + ["    " + ln for ln in far]) + "\n"


def compare(check, x: np.ndarray) -> bool:
    """Whether `check` (_check_source's function) gives the libm's bits in both forms."""
    out = [np.empty_like(x) for _ in range(6)]
    check(x, *out)
    bits = [o.view(np.uint32) for o in out]
    return all(np.array_equal(bits[i], bits[i + j]) for i in (0, 1) for j in (2, 4))


@functools.lru_cache(maxsize=None)
def vector_trig_ok() -> bool:
    """Whether the vector forms give this process's libm's bits (module docstring); once
    per process (the check's machine code is cached on disk, jit_cache.py)."""
    from .jit_cache import cached_function
    check = cached_function(_check_source(), {}, "check", nogil=True, error_model="numpy")
    return compare(check, check_inputs())
