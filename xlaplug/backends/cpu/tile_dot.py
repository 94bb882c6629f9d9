"""Small f32 dots of a compiled loop as tiled loops that give the interpreter's bits.

The interpreter's dot is numpy's matmul, so BLAS's: for a small product OpenBLAS sums each
result element as a chain of fused multiply-adds over k from 0 -- one chain, or (for some
shapes: 8 rows and an even K on this machine's Haswell kernels) an even-k and an odd-k
chain added at the end.  numba's np.dot reaches BLAS through scipy's copy of it, at 2-5x
the cost of a loop for these sizes (f32[8,64] x f32[64,256]: 7.5 us against 1.3 us tiled,
CPU time, 2026-12-06), which made the dots 70% of a scanned LSTM cell.

So a dot out[i, j] = sum_k x[i, k] y[k, j] whose y rows are contiguous (a (K, N) matrix
contracted along its first dimension) becomes a function of its own:

    def bT0(x, y, out, odd):             # out: the even-k chain, odd: the odd-k one
        ...                              # TILE_ROWS rows of out, TILE_KS steps of k a pass:
            for j in range(256):         # each loaded y row serves TILE_ROWS rows of out
                y0 = y[(k + 0) * 256 + j]
                ...
                e = out[(i + 0) * 256 + j]
                e = _xfma32(x0_0, y0, e)
                ...
        for j in range(2048):
            out[j] = out[j] + odd[j]

-- but only where that order is BLAS's for the dot's shape: `blas_chains` compares the
loop's order (emulated in numpy) with the interpreter's product on random operands, once
per shape in a process, and says how many chains give BLAS's bits (1 or 2), or None (the
dot then calls BLAS, as before).  A different BLAS, or another CPU's kernels, only makes
fewer dots tiled; never other bits.
"""
from __future__ import annotations

import functools
import math

import numpy as np

# Up to this many multiply-adds: OpenBLAS runs such a product on the calling thread
# (cpu/denormals.py), so its order does not hang on how many threads the run gives it (its
# edge tiles, where the order changes, would move).  Then rows of out and steps of k per
# pass over a y row.
TILE_MAX_MACS = 1 << 18
TILE_MAX_K = 512  # (BLAS splits longer sums; and the check's emulation takes K steps)
TILE_ROWS, TILE_KS = 4, 4
_SAMPLES = 4096  # result elements compared, at least, before a shape's order is trusted


def tile_form(lhs_dims: tuple, rhs_dims: tuple, lc: int, rc: int):
    """(x is the lhs, M, K, N, x's index of (i, k) as a format string) with the dot as
    out[i, j] = sum_k x[i, k] y[k, j] over flat row-major arrays, y's rows contiguous; None
    when neither operand is such a y."""
    if len(rhs_dims) == 2 and rc == 0 and len(lhs_dims) <= 2:
        k, n = rhs_dims
        if len(lhs_dims) == 1:
            return True, 1, k, n, "{k}"
        m = lhs_dims[1 - lc]
        return True, m, k, n, ("{i} * %d + {k}" % k) if lc == 1 else ("{k} * %d + {i}" % m)
    if len(lhs_dims) == 2 and lc == 0 and len(rhs_dims) == 1:
        # (K, M)^T times a vector: the vector as one row times the (K, M) matrix
        return False, 1, lhs_dims[0], lhs_dims[1], "{k}"
    return None


def _emulated(x: np.ndarray, y: np.ndarray, chains: int) -> np.ndarray:
    """The tiled loop's values in numpy: each chain's steps fused multiply-adds (the exact
    f64 product plus the f32 accumulator, rounded to f32; a double rounding is a ~2^-29
    event, and could only make a shape's order look unlike BLAS's)."""
    accs = [np.zeros((x.shape[0], y.shape[1]), np.float32) for _ in range(chains)]
    for k in range(x.shape[1]):
        a = accs[k % chains]
        a[:] = (x[:, k:k + 1].astype(np.float64) * y[k].astype(np.float64) + a).astype(np.float32)
    return accs[0] if chains == 1 else accs[0] + accs[1]


@functools.lru_cache(maxsize=None)
def blas_chains(lhs_dims: tuple, rhs_dims: tuple, lc: int, rc: int) -> int | None:
    """How many chains give the interpreter's f32 product bits for this dot's form, or None
    (module docstring).  The interpreter transposes the operands to (M, K) and (K, N) views
    and multiplies them with numpy's matmul (linalg._dot); so does this, on random operands
    of a fixed seed, a few times for a small result (the emulation takes the trials' rows
    together: K numpy steps in all)."""
    form = tile_form(lhs_dims, rhs_dims, lc, rc)
    if form is None or form[2] > TILE_MAX_K:
        return None
    _, m, k, n, _ = form
    rng = np.random.default_rng(0)
    trials = min(64, math.ceil(_SAMPLES / max(1, m * n)))
    lperm = [d for d in range(len(lhs_dims)) if d != lc] + [lc]
    rperm = [rc] + [d for d in range(len(rhs_dims)) if d != rc]
    xs, want = [], []
    y = rng.standard_normal(rhs_dims).astype(np.float32)
    ym = y.transpose(rperm).reshape(k, -1)
    for _ in range(trials):  # one y, several x: each trial a product as the interpreter's
        x = rng.standard_normal(lhs_dims).astype(np.float32)
        xs.append(x.transpose(lperm).reshape(-1, k))
        want.append(xs[-1] @ ym)
    x, want = np.concatenate(xs), np.concatenate(want)
    for chains in (1, 2):
        if np.array_equal(_emulated(x, ym, chains).view(np.uint32), want.view(np.uint32)):
            return chains
    return None


def tile_source(fn: str, m: int, k: int, n: int, xi: str, chains: int) -> str:
    """The tiled loop `fn(x, y, out)`, or `fn(x, y, out, odd)` for two chains (module
    docstring): each chain in a pass of its own over its steps of k (stride `chains`), so
    that either pass loads and stores a row of its sums once per TILE_KS multiply-adds."""
    two = chains == 2
    lines = [f"def {fn}(x, y, out{', odd' if two else ''}):", f"    for j in range({m * n}):",
             "        out[j] = np.float32(0)"] + (["        odd[j] = np.float32(0)"] if two else [])
    rows = m - m % TILE_ROWS
    for c, acc in list(zip(range(chains), ("out", "odd"))):
        steps = len(range(c, k, chains))           # this chain's steps of k: c, c + chains..
        full = steps - steps % TILE_KS
        for i0, i1, r in ((0, rows, TILE_ROWS), (rows, m, 1)):
            if i1 <= i0:
                continue
            lines.append(f"    for i in range({i0}, {i1}, {r}):")
            for s0, s1, u in ((0, full, TILE_KS), (full, steps, steps - full)):
                if s1 <= s0:
                    continue
                lines.append(f"        for k in range({c + s0 * chains}, {c + s1 * chains}, "
                             f"{u * chains}):")
                ks = [f"(k + {q * chains})" for q in range(u)]
                lines += [f"            x{a}_{q} = x[{xi.format(i=f'(i + {a})', k=kq)}]"
                          for a in range(r) for q, kq in enumerate(ks)]
                lines.append(f"            for j in range({n}):")
                lines += [f"                y{q} = y[{kq} * {n} + j]" for q, kq in enumerate(ks)]
                for a in range(r):
                    at = f"(i + {a}) * {n} + j"
                    lines.append(f"                e = {acc}[{at}]")
                    lines += [f"                e = _xfma32(x{a}_{q}, y{q}, e)" for q in range(u)]
                    lines.append(f"                {acc}[{at}] = e")
    if two:
        lines += [f"    for j in range({m * n}):", "        out[j] = out[j] + odd[j]"]
    return "\n".join(["from xlaplug.backends.cpu.jit_options import callee_njit as _njit", *lines,
                      f'{fn} = _njit(nogil=True, error_model="numpy")({fn})', ""])
