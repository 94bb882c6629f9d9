"""The folds of a row loop's reduces (row_loop.py) that must give what the unfused kernel's
numpy fast path gives (cpu/reductions.py: a plain add, multiply, maximum or minimum with its
identity as init), as numba source over a row buffer `buf` of K elements:

  * add: numpy's pairwise sum -- blocks of at most 128 elements summed with 8 accumulators,
    longer ranges split in halves at multiples of 8 (below 8 elements: in order from 0);
    the split depends on K only, so it is worked out here, once, as a program of leaves
    and adds that the loop runs with a small stack; then added onto init, as numpy does.
    Without flushes, rows of f32/f64 run it as vector code (pairwise_vector.py);
  * multiply: in order, from init (numpy multiplies plainly, with no pairing);
  * maximum / minimum: the value does not depend on the order (a NaN anywhere wins), but a
    0's sign does (-0 and +0 compare equal: the first in its lane stays), so 8 lanes in
    numpy's order -- which LLVM keeps scalar.  An f32 row without a flush (a row loop's)
    first takes the max and min of its elements' order-preserving integer codes, a loop
    LLVM vectorizes; only a row whose result is a 0 or that holds a NaN runs the 8 lanes
    (`coded_extreme`).
"""
from __future__ import annotations

import numpy as np

from .pairwise_vector import pairwise_program, vectorizable


def fast_fold(op: str, buf: str, K: int, init_v: str, res: str, ct: str, j: int,
              pad: str, flush: str | None = None, flush_loads: bool = True,
              vector: bool = False, daz: bool = False) -> tuple[list[str], list[str], dict]:
    """(lines setting `res`, scratch allocations, module constants) for reduce number j.
    The 8 accumulators are scalar locals, which stay scalar (numba runs no SLP vectorizer).
    `flush`: a function that flushes a subnormal to a signed 0, applied to every element
    and every partial sum or product, as numpy runs under the kernel's FTZ and DAZ
    (cpu/denormals.py); None: IEEE arithmetic.  `flush_loads` False: the elements hold no
    subnormal already (loop_daz.py), and are loaded as they are.  `vector`: an add without
    flushes may call pairwise_vector.pairwise_sum as `_xpairwise` (the caller's module
    imports it: pairwise_vector.IMPORT).  `daz`: the loop runs under the MXCSR's DAZ
    (hardware_flush.py), where the lanes' compares read a subnormal as 0."""
    p2, p3 = pad + "    ", pad + "        "
    r = [f"r{j}_{t}" for t in range(8)]

    def f(e: str) -> str:  # a value as the kernel sees it: flushed, or as it is
        return f"{flush}({e})" if flush else e

    def ld(e: str) -> str:  # an element of the row as the kernel sees it
        return f(e) if flush_loads else e

    def pair(a: str, b: str) -> str:  # a partial sum of two
        return f(f"{a} + {b}") if flush else f"({a} + {b})"
    if op == "add" and 8 <= K <= 128:
        # One leaf: the same adds with constant bounds and no stack (a scan's f32[64] sum:
        # 38 of its 200 ns a step went to the program's loop, 2026-12-06).
        n8 = K - K % 8
        lanes = pair(pair(pair(r[0], r[1]), pair(r[2], r[3])),
                     pair(pair(r[4], r[5]), pair(r[6], r[7])))
        return [*[f"{pad}{r[t]} = {ld(f'{buf}[{t}]')}" for t in range(8)],
                f"{pad}for q in range(8, {n8}, 8):",
                *[f"{p2}{r[t]} = {f(f'{r[t]} + ' + ld(f'{buf}[q + {t}]'))}" for t in range(8)],
                f"{pad}rs{j} = {lanes if flush else lanes[1:-1]}",
                f"{pad}for q in range({n8}, {K}):",
                f"{p2}rs{j} = {f(f'rs{j} + ' + ld(f'{buf}[q]'))}",
                f"{pad}{res} = {f(f'{init_v} + rs{j}')}"], [], {}
    if op == "add" and vector and flush is None and vectorizable(ct, K):
        # numpy's sum as vector code (pairwise_vector.py; the caller imports it)
        return [f"{pad}{res} = {init_v} + _xpairwise({buf}, {K})"], [], {}
    if op == "add" and K >= 8:
        starts, lens, prog = pairwise_program(K)
        consts = {f"RPS{j}": np.asarray(starts, np.int64), f"RPL{j}": np.asarray(lens, np.int64),
                  f"RPP{j}": np.asarray(prog, np.int64)}
        stk = f"stk{j}"
        lanes = pair(pair(pair(r[0], r[1]), pair(r[2], r[3])),
                     pair(pair(r[4], r[5]), pair(r[6], r[7])))
        lines = [f"{pad}sp = 0", f"{pad}for t in range({len(prog)}):",
                 f"{p2}c = RPP{j}[t]", f"{p2}if c < 0:", f"{p3}sp -= 1",
                 f"{p3}{stk}[sp - 1] = {f(f'{stk}[sp - 1] + {stk}[sp]')}", f"{p3}continue",
                 f"{p2}s0 = RPS{j}[c]", f"{p2}nl = RPL{j}[c]",
                 *[f"{p2}{r[t]} = {ld(f'{buf}[s0 + {t}]')}" for t in range(8)],
                 f"{p2}q = s0 + 8", f"{p2}n8 = s0 + nl - nl % 8", f"{p2}while q < n8:",
                 *[f"{p3}{r[t]} = {f(f'{r[t]} + ' + ld(f'{buf}[q + {t}]'))}" for t in range(8)],
                 f"{p3}q += 8",
                 f"{p2}rs{j} = {lanes if flush else lanes[1:-1]}",
                 f"{p2}while q < s0 + nl:", f"{p3}rs{j} = {f(f'rs{j} + ' + ld(f'{buf}[q]'))}",
                 f"{p3}q += 1", f"{p2}{stk}[sp] = rs{j}", f"{p2}sp += 1",
                 f"{pad}{res} = {f(f'{init_v} + {stk}[0]')}"]
        return lines, [f"{stk} = np.empty({len(prog)}, {ct})"], consts
    if op == "add":  # fewer than 8: in order, from zero, then onto init
        return [f"{pad}{res} = {ct}(0)", f"{pad}for k in range({K}):",
                f"{p2}{res} = {f(f'{res} + ' + ld(f'{buf}[k]'))}",
                f"{pad}{res} = {f(f'{init_v} + {res}')}"], [], {}
    if op == "multiply":
        return [f"{pad}{res} = {init_v}", f"{pad}for k in range({K}):",
                f"{p2}{res} = {f(f'{res} * ' + ld(f'{buf}[k]'))}"], [], {}
    coded = flush is None and ct == "np.float32"  # (see the module docstring)
    if coded:
        pad, p2 = p2, p2 + "    "  # the lanes run inside coded_extreme's `if`
    cmp = ">" if op == "maximum" else "<"
    nn, v = f"nn{j}", f"v{j}"
    # Whether a NaN was seen, or-ed in: a count (nn += v != v) chained every element
    # through an integer add and kept the fold scalar (256 rows of 32: 5.1 -> 2.1 us).
    lines = [f"{pad}{nn} = False", *[f"{pad}{r[t]} = {init_v}" for t in range(8)],
             f"{pad}for q in range(0, {K - K % 8}, 8):"]
    for t in range(8):
        lines += [f"{p2}{v} = {ld(f'{buf}[q + {t}]')}",
                  f"{p2}{r[t]} = {v} if {v} {cmp} {r[t]} else {r[t]}",
                  f"{p2}{nn} |= {v} != {v}"]
    lines += [f"{pad}{res} = {init_v}",
              *[f"{pad}{res} = {r[t]} if {r[t]} {cmp} {res} else {res}" for t in range(8)],
              f"{pad}for k in range({K - K % 8}, {K}):", f"{p2}{v} = {ld(f'{buf}[k]')}",
              f"{p2}{res} = {v} if {v} {cmp} {res} else {res}",
              f"{p2}{nn} |= {v} != {v}",
              f"{pad}if {nn}:", f"{p2}{res} = {ct}(np.nan)"]
    if coded:
        lines = coded_extreme(op, buf, K, init_v, res, j, pad[:-4], lines, daz)
    return lines, [], {}


# f32 bits -> an int32 code in the same order: b ^ ((b >> 31) & 0x7FFFFFFF) (its own inverse).
# -inf is -2139095041, +inf 0x7F800000, NaNs beyond them; -0 is -1 and +0 is 0.
_CODE = "{b} ^ (({b} >> np.int32(31)) & np.int32(0x7FFFFFFF))"


def coded_extreme(op: str, buf: str, K: int, init_v: str, res: str, j: int, pad: str,
                  lanes: list[str], daz: bool = False) -> list[str]:
    """Lines setting `res` to the f32 fold of `buf` (maximum or minimum from init, its
    identity) as `lanes` (the 8-lane fold) gives it: the row's largest and smallest codes
    in one loop LLVM vectorizes (integer max and min reorder freely); the value they name
    is the fold's -- a value other than 0 and NaN has one bit pattern -- unless the result
    is a 0 (its sign is the lanes' order's) or a NaN is there: then `lanes` runs.  The
    transformer block's causal softmax loop (f32[4096,128], a max and a sum a row): 0.47
    -> 0.40 ms on one core (CPU time, load 8).  The codes stay int32 at every step (the
    np.int32 wrappers): numba widens integer arithmetic to int64, same values, but AVX2 has
    no packed int64 max (f32[4096,1024] 0.61 ms widened, 0.24 int32, AVX2 code).  `daz`:
    under the MXCSR's DAZ the lanes read a subnormal as a 0 of its sign, so a subnormal
    result runs them too."""
    p2, hi, lo, b = pad + "    ", f"hi{j}", f"lo{j}", f"b{j}"
    pick = hi if op == "maximum" else lo
    cmp = ">" if op == "maximum" else "<"
    # codes of +-0 (0 and -1), and with them under DAZ the subnormals' (-0x800000..0x7FFFFF)
    zero = (f"(np.int32(-8388608) <= {pick} <= np.int32(8388607))" if daz else
            f"{pick} == np.int32(0) or {pick} == np.int32(-1)")
    return [f"{pad}{hi} = np.int32(-2147483648)", f"{pad}{lo} = np.int32(2147483647)",
            f"{pad}for k in range({K}):", f"{p2}{b} = _xbits32({buf}[k])",
            f"{p2}{b} = np.int32({_CODE.format(b=b)})",
            f"{p2}{hi} = np.int32(max({hi}, {b}))", f"{p2}{lo} = np.int32(min({lo}, {b}))",
            f"{pad}if {hi} > np.int32(0x7F800000) or {lo} < np.int32(-2139095041) or {zero}:",
            *lanes,
            f"{pad}else:", f"{p2}{res} = _xfrom_bits32({_CODE.format(b=pick)})",
            f"{p2}{res} = {res} if {res} {cmp} {init_v} else {init_v}"]
