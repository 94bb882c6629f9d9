"""jax_lapack: the CPU LAPACK custom calls JAX emits for jnp.linalg / jax.scipy.linalg.

    %chol = (f32[4,4]{0,1}, s32[]) custom-call(%a), custom_call_target="lapack_spotrf_ffi",
            api_version=API_VERSION_TYPED_FFI, backend_config={uplo = 76 : ui8}

Targets (`lapack_<p><routine>_ffi`, p = s/d/c/z for f32/f64/c64/c128): potrf, getrf, trsm,
syevd/heevd, geqrf, orgqr/ungqr, ormqr/unmqr, geqp3, gesdd, gesvd, geev, gehrd,
sytrd/hetrd, gtsv.  Operand and result order, the batch dimensions in front, the info
outputs and the character attributes (`uplo`, `mode`, `side`, `trans_x`, `diag`,
`compute_left/right`; plus `left`/`transpose` bools and `low`/`high` ints) are those of
jaxlib's FFI handlers.  Not provided: gees (jax.scipy.linalg.schur / sqrtm / funm).

Layouts: JAX pins every matrix operand and result of these calls to column-major
(`operand_layout_constraints={f32[4,4]{0,1}}`, results `{0,1}`, batched `{1,2,0}`), so the
column-major matrix LAPACK reads is exactly the logical value the executor hands a kernel;
the kernels therefore work on logical matrices and never transpose.  (A hand-written
call constraining an operand to row-major would make XLA's LAPACK see its transpose;
kernels cannot see the constraints, and nothing JAX emits does that.)

Results are LAPACK's where LAPACK's are unique, and LAPACK's representation where they
are not (Householder reflectors and taus, pivots, eigenvector normalisation): see
_kernels.py, _householder.py, _solvers.py and _geev.py for what is exact and what is not.

Decompositions (_decompositions.py, _decomp_*.py): every routine also lowers to core HLO
(while loops, dynamic slices, dots), so `compile --decompose-all` makes a module any XLA
backend runs: Cholesky, triangular solve and LU as XLA's expanders and jax's unblocked LU
do, Householder QR / Q / Q-products, pivoted QR, Hessenberg and tridiagonal reductions and
the tridiagonal solve step for step as LAPACK's unblocked routines (same representation,
pivots and info codes), Jacobi eigh and one-sided Jacobi SVD, and geev by Hessenberg
reduction, shifted QR and back substitution.  Eigen- and singular vectors (and geev's
order) are the kernels' only up to a phase: check-plugins compares canonical forms.

CUDA: potrf, getrf, trsm, geqrf, orgqr/ungqr and syevd/heevd also have numba.cuda kernels
(_cuda.py), one thread per matrix.  They follow the CPU kernels' algorithms and
representations; syevd/heevd (cyclic Jacobi) gives LAPACK's eigenvalues, but its
eigenvectors may differ from LAPACK's by a sign (a phase, complex) per column.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xlaplug.hlo.errors import HloError
from xlaplug.hlo.ir import Shape
from xlaplug.plugin import Plugin

from . import _cuda
from . import _kernels as K
from ._common import char
from ._decompositions import CANONICAL, DECOMPOSED
from ._geev import geev

plugin = Plugin("jax_lapack", version="1.0",
                description="JAX's CPU LAPACK custom calls (lapack_*_ffi): numpy kernels, "
                             "numba.cuda for the factorizations")

TYPES = {"s": "f32", "d": "f64", "c": "c64", "z": "c128"}
REAL = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}
COMPLEX = {"f32": "c64", "f64": "c128", "c64": "c64", "c128": "c128"}
L, U, N, V = (np.uint8(ord(c)) for c in "LUNV")


@dataclass(frozen=True)
class _EitherShape(Shape):
    """A result with two acceptable shapes: ?gesdd with jobz='N' never touches u / vt, and
    jax declares them full (m x m) or economy (m x k) depending on the caller."""
    alternatives: tuple = ()

    def compatible(self, other: Shape) -> bool:
        return any(Shape.compatible(alt, other) for alt in self.alternatives)


def _arr(etype, dims) -> Shape:
    return Shape.array(etype, tuple(dims))


def _matrix(target: str, shape: Shape, etype: str, square: bool = False):
    if shape.is_tuple or shape.rank < 2 or shape.element_type != etype:
        raise HloError(f"{target}: operand must be a {etype}[..., m, n] matrix (batch "
                       f"dimensions first), got {shape}")
    if square and shape.dims[-1] != shape.dims[-2]:
        raise HloError(f"{target}: operand must be square, got {shape}")
    return shape.dims[:-2], shape.dims[-2], shape.dims[-1]


def _char_attr(target: str, name: str, value, allowed: str, default: str) -> str:
    c = char(value, default)
    if c not in allowed:
        raise HloError(f"{target}: attribute {name} = '{c}' is not one of "
                       f"{', '.join(repr(x) for x in allowed)}")
    return c


# ---- shape rules, one per routine; `t` is the target, `e` its element type -------------

def _potrf_shape(t, e):
    def rule(a, *, uplo=L, **_):
        batch, _, _ = _matrix(t, a, e, square=True)
        _char_attr(t, "uplo", uplo, "LU", "L")
        return (a, _arr("s32", batch))
    return rule


def _getrf_shape(t, e):
    def rule(a, **_):
        batch, m, n = _matrix(t, a, e)
        return (a, _arr("s32", batch + (min(m, n),)), _arr("s32", batch))
    return rule


def _trsm_shape(t, e):
    def rule(a, b, *alpha, side=L, uplo=L, trans_x=N, diag=N, **_):
        _, k, _ = _matrix(t, a, e, square=True)
        _, m, n = _matrix(t, b, e)
        s = _char_attr(t, "side", side, "LR", "L")
        _char_attr(t, "uplo", uplo, "LU", "L")
        _char_attr(t, "trans_x", trans_x, "NTC", "N")
        _char_attr(t, "diag", diag, "NU", "N")
        if k != (m if s == "L" else n):
            raise HloError(f"{t}: a is {a} but b is {b} (side {s})")
        return b
    return rule


def _syevd_shape(t, e):
    def rule(a, *, uplo=L, mode=V, **_):
        batch, n, _ = _matrix(t, a, e, square=True)
        _char_attr(t, "uplo", uplo, "LU", "L")
        _char_attr(t, "mode", mode, "NV", "V")
        return (a, _arr(REAL[e], batch + (n,)), _arr("s32", batch))
    return rule


def _geqrf_shape(t, e):
    def rule(a, **_):
        batch, m, n = _matrix(t, a, e)
        return (a, _arr(e, batch + (min(m, n),)))
    return rule


def _orgqr_shape(t, e):
    def rule(a, tau, **_):
        _matrix(t, a, e)
        return a
    return rule


def _ormqr_shape(t, e):
    def rule(a, tau, c, **_):
        _matrix(t, a, e)
        _matrix(t, c, e)
        return c
    return rule


def _geqp3_shape(t, e):
    def rule(a, jpvt, **_):
        batch, m, n = _matrix(t, a, e)
        return (a, jpvt, _arr(e, batch + (min(m, n),)))
    return rule


def _svd_shape(t, e):
    def rule(a, *, mode=np.uint8(65), **_):
        batch, m, n = _matrix(t, a, e)
        k = min(m, n)
        job = _char_attr(t, "mode", mode, "ASN", "A")
        full = (_arr(e, batch + (m, m)), _arr(e, batch + (n, n)))
        econ = (_arr(e, batch + (m, k)), _arr(e, batch + (k, n)))
        if job == "A":
            u, vt = full
        elif job == "S":
            u, vt = econ
        else:
            u, vt = (_EitherShape(e, f.dims, f.dynamic, alternatives=(f, s))
                     for f, s in zip(full, econ))
        return (a, _arr(REAL[e], batch + (k,)), u, vt, _arr("s32", batch))
    return rule


def _geev_shape(t, e):
    def rule(a, *, compute_left=N, compute_right=V, **_):
        batch, n, _ = _matrix(t, a, e, square=True)
        _char_attr(t, "compute_left", compute_left, "NV", "N")
        _char_attr(t, "compute_right", compute_right, "NV", "V")
        vec = _arr(COMPLEX[e], batch + (n, n))
        vals = (_arr(e, batch + (n,)),) * (2 if e in ("f32", "f64") else 1)
        return (*vals, vec, vec, _arr("s32", batch))
    return rule


def _gehrd_shape(t, e):
    def rule(a, *, low=1, high=None, **_):
        batch, n, _ = _matrix(t, a, e, square=True)
        return (a, _arr(e, batch + (max(n - 1, 0),)), _arr("s32", batch))
    return rule


def _sytrd_shape(t, e):
    def rule(a, *, uplo=L, **_):
        batch, n, _ = _matrix(t, a, e, square=True)
        _char_attr(t, "uplo", uplo, "LU", "L")
        r, m1 = REAL[e], max(n - 1, 0)
        return (a, _arr(r, batch + (n,)), _arr(r, batch + (m1,)), _arr(e, batch + (m1,)),
                _arr("s32", batch))
    return rule


def _gtsv_shape(t, e):
    def rule(dl, d, du, b, **_):
        batch, n, _ = _matrix(t, b, e)
        for name, v in (("dl", dl), ("d", d), ("du", du)):
            if v.element_type != e or tuple(v.dims) != tuple(batch) + (n,):
                raise HloError(f"{t}: {name} must be {e}{list(batch) + [n]}, got {v}")
        return (dl, d, du, b, _arr("s32", batch))
    return rule


# ---- the table: routine -> (dtype prefixes, shape rule, kernel, example) -----------------

def _ex(*shapes, **attrs):
    return [(shapes, attrs)]


ROUTINES = {
    "potrf": ("sdcz", _potrf_shape, K.potrf, lambda e: _ex(f"{e}[4,4]{{0,1}}", uplo=L)),
    "getrf": ("sdcz", _getrf_shape, K.getrf, lambda e: _ex(f"{e}[2,4,3]{{1,2,0}}")),
    "trsm": ("sdcz", _trsm_shape, K.trsm, lambda e: _ex(
        f"{e}[4,4]{{0,1}}", f"{e}[4,2]{{0,1}}", side=L, uplo=L, trans_x=N, diag=N)),
    "syevd": ("sd", _syevd_shape, K.syevd, lambda e: _ex(f"{e}[4,4]{{0,1}}", mode=V, uplo=L)),
    "heevd": ("cz", _syevd_shape, K.syevd, lambda e: _ex(f"{e}[4,4]{{0,1}}", mode=V, uplo=L)),
    "geqrf": ("sdcz", _geqrf_shape, K.geqrf, lambda e: _ex(f"{e}[5,3]{{0,1}}")),
    "orgqr": ("sd", _orgqr_shape, K.orgqr, lambda e: _ex(f"{e}[5,3]{{0,1}}", f"{e}[3]{{0}}")),
    "ungqr": ("cz", _orgqr_shape, K.orgqr, lambda e: _ex(f"{e}[5,3]{{0,1}}", f"{e}[3]{{0}}")),
    "ormqr": ("sd", _ormqr_shape, K.ormqr, lambda e: _ex(
        f"{e}[4,3]{{0,1}}", f"{e}[3]{{0}}", f"{e}[4,2]{{0,1}}", left=True, transpose=False)),
    "unmqr": ("cz", _ormqr_shape, K.ormqr, lambda e: _ex(
        f"{e}[4,3]{{0,1}}", f"{e}[3]{{0}}", f"{e}[2,4]{{0,1}}", left=False, transpose=True)),
    "geqp3": ("sdcz", _geqp3_shape, K.geqp3, lambda e: _ex(f"{e}[4,3]{{0,1}}", "s32[3]{0}")),
    "gesdd": ("sdcz", _svd_shape, K.gesdd, lambda e: _ex(f"{e}[4,3]{{0,1}}", mode=np.uint8(83))),
    "gesvd": ("sdcz", _svd_shape, K.gesdd, lambda e: _ex(f"{e}[3,4]{{0,1}}", mode=np.uint8(65))),
    "geev": ("sdcz", _geev_shape, geev, lambda e: _ex(
        f"{e}[4,4]{{0,1}}", compute_left=N, compute_right=V)),
    "gehrd": ("sdcz", _gehrd_shape, K.gehrd, lambda e: _ex(
        f"{e}[4,4]{{0,1}}", low=np.int32(1), high=np.int32(4))),
    "sytrd": ("sd", _sytrd_shape, K.sytrd, lambda e: _ex(f"{e}[4,4]{{0,1}}", uplo=L)),
    "hetrd": ("cz", _sytrd_shape, K.sytrd, lambda e: _ex(f"{e}[4,4]{{0,1}}", uplo=U)),
    "gtsv": ("sdcz", _gtsv_shape, K.gtsv, lambda e: _ex(
        f"{e}[4]{{0}}", f"{e}[4]{{0}}", f"{e}[4]{{0}}", f"{e}[4,2]{{0,1}}")),
}

TARGETS: list[str] = []

for _routine, (_prefixes, _shape, _kernel, _examples) in ROUTINES.items():
    for _p in _prefixes:
        _target = f"lapack_{_p}{_routine}_ffi"
        _etype = TYPES[_p]
        _ex_list = _examples(_etype)
        plugin.shape(_target, examples=_ex_list)(_shape(_target, _etype))
        plugin.kernel(_target, device="cpu", examples=_ex_list)(_kernel)
        if _routine in DECOMPOSED:  # core HLO for the portable artifact (issue 26)
            plugin.decomposition(_target, examples=_ex_list,
                                 canonical=CANONICAL.get(_routine))(DECOMPOSED[_routine])
        TARGETS.append(_target)

CUDA_TARGETS: list[str] = _cuda.register(plugin, ROUTINES, TYPES)
