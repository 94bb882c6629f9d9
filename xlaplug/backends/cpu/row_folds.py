"""The folds of a row loop's reduces (row_loop.py) that must give what the unfused kernel's
numpy fast path gives (cpu/reductions.py: a plain add, multiply, maximum or minimum with its
identity as init), as numba source over a row buffer `buf` of K elements:

  * add: numpy's pairwise sum -- blocks of at most 128 elements summed with 8 accumulators,
    longer ranges split in halves at multiples of 8 (below 8 elements: in order from 0);
    the split depends on K only, so it is worked out here, once, as a program of leaves
    and adds that the loop runs with a small stack; then added onto init, as numpy does;
  * multiply: in order, from init (numpy multiplies plainly, with no pairing);
  * maximum / minimum: the value does not depend on the order (a NaN anywhere wins), so
    8 lanes, which LLVM vectorizes.
"""
from __future__ import annotations

import numpy as np


def pairwise_program(n: int) -> tuple[list[int], list[int], list[int]]:
    """numpy's pairwise sum of n >= 8 elements as (leaf starts, leaf lengths, program): the
    program lists leaves (index >= 0) and adds (-1: the two values on top of the stack)
    in postfix order -- a leaf is at most 128 elements, a longer range splits at
    n2 = n // 2 rounded down to a multiple of 8."""
    starts, lens, prog = [], [], []

    def walk(s: int, n: int) -> None:
        if n <= 128:
            prog.append(len(starts))
            starts.append(s)
            lens.append(n)
            return
        n2 = n // 2
        n2 -= n2 % 8
        walk(s, n2)
        walk(s + n2, n - n2)
        prog.append(-1)
    walk(0, n)
    return starts, lens, prog


def fast_fold(op: str, buf: str, K: int, init_v: str, res: str, ct: str, j: int,
              pad: str) -> tuple[list[str], list[str], dict]:
    """(lines setting `res`, scratch allocations, module constants) for reduce number j."""
    p2, p3 = pad + "    ", pad + "        "
    if op == "add" and K >= 8:
        starts, lens, prog = pairwise_program(K)
        consts = {f"RPS{j}": np.asarray(starts, np.int64), f"RPL{j}": np.asarray(lens, np.int64),
                  f"RPP{j}": np.asarray(prog, np.int64)}
        a, stk = f"a{j}", f"stk{j}"
        s = [f"{a}[{t}]" for t in range(8)]
        allocs = [f"{a} = np.empty(8, {ct})", f"{stk} = np.empty({len(prog)}, {ct})"]
        lines = [f"{pad}sp = 0", f"{pad}for t in range({len(prog)}):",
                 f"{p2}c = RPP{j}[t]", f"{p2}if c < 0:", f"{p3}sp -= 1",
                 f"{p3}{stk}[sp - 1] = {stk}[sp - 1] + {stk}[sp]", f"{p3}continue",
                 f"{p2}s0 = RPS{j}[c]", f"{p2}nl = RPL{j}[c]",
                 f"{p2}for jj in range(8):", f"{p3}{a}[jj] = {buf}[s0 + jj]",
                 f"{p2}q = 8", f"{p2}while q < nl - nl % 8:",
                 f"{p3}for jj in range(8):",
                 f"{p3}    {a}[jj] = {a}[jj] + {buf}[s0 + q + jj]",
                 f"{p3}q += 8",
                 f"{p2}rs{j} = (({s[0]} + {s[1]}) + ({s[2]} + {s[3]})) + "
                 f"(({s[4]} + {s[5]}) + ({s[6]} + {s[7]}))",
                 f"{p2}while q < nl:", f"{p3}rs{j} = rs{j} + {buf}[s0 + q]", f"{p3}q += 1",
                 f"{p2}{stk}[sp] = rs{j}", f"{p2}sp += 1",
                 f"{pad}{res} = {init_v} + {stk}[0]"]
        return lines, allocs, consts
    if op == "add":  # fewer than 8: in order, from zero, then onto init
        return [f"{pad}{res} = {ct}(0)", f"{pad}for k in range({K}):",
                f"{p2}{res} = {res} + {buf}[k]", f"{pad}{res} = {init_v} + {res}"], [], {}
    if op == "multiply":
        return [f"{pad}{res} = {init_v}", f"{pad}for k in range({K}):",
                f"{p2}{res} = {res} * {buf}[k]"], [], {}
    cmp = ">" if op == "maximum" else "<"
    a, nn, v = f"a{j}", f"nn{j}", f"v{j}"
    lines = [f"{pad}{nn} = 0",
             f"{pad}for jj in range(8):", f"{p2}{a}[jj] = {init_v}",
             f"{pad}for q in range(0, {K - K % 8}, 8):", f"{p2}for jj in range(8):",
             f"{p3}{v} = {buf}[q + jj]",
             f"{p3}{a}[jj] = {v} if {v} {cmp} {a}[jj] else {a}[jj]",
             f"{p3}{nn} += {v} != {v}",
             f"{pad}{res} = {init_v}", f"{pad}for jj in range(8):",
             f"{p2}{res} = {a}[jj] if {a}[jj] {cmp} {res} else {res}",
             f"{pad}for k in range({K - K % 8}, {K}):", f"{p2}{v} = {buf}[k]",
             f"{p2}{res} = {v} if {v} {cmp} {res} else {res}",
             f"{p2}{nn} += {v} != {v}",
             f"{pad}if {nn}:", f"{p2}{res} = {ct}(np.nan)"]
    return lines, [f"{a} = np.empty(8, {ct})"], {}
