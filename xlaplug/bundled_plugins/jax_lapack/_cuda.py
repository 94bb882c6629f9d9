"""CUDA kernels (numba.cuda) for JAX's LAPACK custom calls: potrf, getrf, trsm, geqrf,
orgqr/ungqr and syevd/heevd, every precision the CPU kernels have.

A kernel for device "cuda" receives the operands as numba.cuda device arrays (logical
values, C-contiguous, batch dimensions first), then preallocated device outputs, then the
attributes.  Everything runs on the device: the wrappers only reshape the arrays to
`(batch, rows, cols)` views and launch one thread per matrix; nothing is copied back to
the host.  The results are the CPU kernels' (the same LAPACK algorithms and
representations: pivots, info codes, Householder reflectors and taus, the untouched
triangle), up to rounding; see _cuda_factor.py and _cuda_qr.py.  syevd/heevd is the
exception: cyclic Jacobi (_cuda_eigh.py) gives LAPACK's eigenvalues, but eigenvectors
that may differ from LAPACK's by a sign (a phase for complex) per column.

The kernel modules import numba.cuda; they are imported on the first call, so loading the
plugin needs neither numba.cuda nor a GPU (as in example_rms_norm.py).
"""
from __future__ import annotations

import numpy as np

from ._common import char

# Routines with CUDA kernels, and the precisions (as in __init__.ROUTINES).
CUDA_ROUTINES = {"potrf": "sdcz", "getrf": "sdcz", "trsm": "sdcz", "geqrf": "sdcz",
                 "orgqr": "sd", "ungqr": "cz", "syevd": "sd", "heevd": "cz"}
_THREADS = 64


def _launch(kernel, n: int, *args) -> None:
    from xlaplug.backends.cuda.launch import launch_1d
    launch_1d(kernel, n, *args, threads=_THREADS)


def _dims(x) -> tuple:
    return tuple(int(d) for d in x.shape)


def _count(dims) -> int:
    return int(np.prod(dims, dtype=np.int64)) if len(dims) else 1


def _view(x, shape: tuple):
    """x reshaped (a view: the arrays are C-contiguous).  numba refuses to reshape an empty
    device array ("operation requires copying"); nothing reads or writes one, so an empty
    array of the new shape serves."""
    if _count(shape) == 0:
        from numba import cuda
        return cuda.device_array(shape, x.dtype)
    return x.reshape(shape)


def _mats(x):
    """(..., m, n) device array -> a (B, m, n) view, and B."""
    d = _dims(x)
    nb = _count(d[:len(d) - 2])
    return _view(x, (nb, d[len(d) - 2], d[len(d) - 1])), nb


def _vecs(x, nb: int):
    """(..., k) (or a scalar per batch element) -> a (B, k) view."""
    d = _dims(x)
    return _view(x, (nb, d[len(d) - 1] if d else 1))


def _flat(x):
    return _view(x, (_count(_dims(x)),))


def _consts(dt):
    dt = np.dtype(dt)
    return dt.type(0), dt.type(1)


def _zero_fill(*arrays) -> None:
    """Info results of routines that cannot fail: zeros, written on the device."""
    from . import _cuda_factor as F
    for x in arrays:
        f = _flat(x)
        _launch(F.zero_kernel, f.shape[0], f, np.dtype(x.dtype).type(0))


def potrf(a, a_out, info, *, uplo=76, **_):
    from . import _cuda_factor as F
    x, nb = _mats(a)
    dt = np.dtype(a.dtype)
    _launch(F.potrf_kernel, nb, x, _mats(a_out)[0], _flat(info),
            char(uplo, "L") == "L", dt.type(0), dt.type(np.nan))


def getrf(a, a_out, ipiv, info, **_):
    from . import _cuda_factor as F
    x, nb = _mats(a)
    dt = np.dtype(a.dtype)
    sfmin = np.finfo(dt).tiny                     # dlamch('S'), what _solvers.getrf uses
    _launch(F.getrf_kernel, nb, x, _mats(a_out)[0], _vecs(ipiv, nb), _flat(info),
            dt.type(1), sfmin)


def trsm(a, b, *rest, side=76, uplo=76, trans_x=78, diag=78, **_):
    """Operands (a, b) or (a, b, alpha); one result.  Side and trans_x fold into one
    effective triangle, as in _solvers.trsm: X op(A) = B is op(A)^T X^T = B^T."""
    from numba import cuda

    from . import _cuda_factor as F
    out = rest[len(rest) - 1]
    dt = np.dtype(b.dtype)
    alpha = _flat(rest[0]) if len(rest) == 2 else cuda.to_device(np.ones(1, dt))
    aa, _ = _mats(a)
    bb, nb = _mats(b)
    oo, _ = _mats(out)
    right = char(side, "L") == "R"
    trans = char(trans_x, "N")
    swap = (trans in "TC") != right
    eff_lower = (char(uplo, "L") == "L") != swap
    nv = oo.shape[1] if right else oo.shape[2]
    _launch(F.trsm_kernel, nb * nv, aa, bb, alpha, oo, right, eff_lower, swap, trans == "C",
            char(diag, "N") == "U")


def geqrf(a, a_out, tau, *extra, **_):
    from . import _cuda_qr as Q
    x, nb = _mats(a)
    _launch(Q.geqrf_kernel, nb, x, _mats(a_out)[0], _vecs(tau, nb), *_consts(a.dtype))
    _zero_fill(*extra)                             # an info result, if the call declares one


def orgqr(a, tau, q_out, *extra, **_):
    from . import _cuda_qr as Q
    x, nb = _mats(a)
    _launch(Q.orgqr_kernel, nb, x, _vecs(tau, nb), _mats(q_out)[0], *_consts(a.dtype))
    _zero_fill(*extra)


def syevd(a, v_out, w_out, info, *, uplo=76, mode=86, **_):
    from . import _cuda_eigh as E
    E.syevd(a, v_out, w_out, info, lower=char(uplo, "L") == "L",
            vectors=char(mode, "V") == "V")


KERNELS = {"potrf": potrf, "getrf": getrf, "trsm": trsm, "geqrf": geqrf, "orgqr": orgqr,
           "ungqr": orgqr, "syevd": syevd, "heevd": syevd}


def register(plugin, routines: dict, types: dict) -> list[str]:
    """Register the CUDA kernels on `plugin` with the CPU kernels' examples (what
    `check-plugins --device cuda` runs); returns the targets."""
    targets = []
    for routine, prefixes in CUDA_ROUTINES.items():
        examples = routines[routine][3]
        for p in prefixes:
            target = f"lapack_{p}{routine}_ffi"
            plugin.kernel(target, device="cuda", examples=examples(types[p]))(KERNELS[routine])
            targets.append(target)
    return targets
