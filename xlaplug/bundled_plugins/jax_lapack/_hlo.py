"""Building blocks of the LAPACK decompositions: batched matrices in core HLO.

Every matrix value is `[..., m, n]` with the batch dimensions in front, as the custom
calls take them.  Loops are HLO `while`s whose state is a tuple `(i, *values)`; their
body and condition computations are made with a child Builder and handed to the parent's
`computations`, which the lowering pass (or check-plugins) adds to the module.  Row and
column picks at a loop index are dynamic slices (the index is one scalar for the whole
batch); picks at a per-matrix index (a pivot row) are one-hot masks and a reduce, since
a dynamic slice cannot take a different start per batch element.
"""
from __future__ import annotations

import numpy as np

from xlaplug.hlo import dtypes
from xlaplug.hlo.attr_types import Word
from xlaplug.hlo.builder import Builder
from xlaplug.hlo.ir import Computation, Shape

REAL_OF = {"f32": "f32", "f64": "f64", "c64": "f32", "c128": "f64"}


def const(b: Builder, value, etype: str):
    return b.constant(np.asarray(value).astype(dtypes.to_dtype(etype)), etype)


def cmp(b: Builder, x, y, direction: str):
    return b.compare(x, y, direction=Word(direction))


def is_complex(x) -> bool:
    return x.shape.element_type in ("c64", "c128")


def real(b: Builder, x):
    return b.real(x) if is_complex(x) else x


def conj(b: Builder, x):
    return b.complex(b.real(x), b.negate(b.imag(x))) if is_complex(x) else x


def as_type(b: Builder, x, etype: str):
    """A real value converted to `etype` (complex: as the real part)."""
    if x.shape.element_type == etype:
        return x
    if etype in ("c64", "c128"):
        x = b.convert(x, REAL_OF[etype]) if x.shape.element_type != REAL_OF[etype] else x
        return b.complex(x, b.broadcast(const(b, 0, REAL_OF[etype]), x.shape.dims))
    return b.convert(x, etype)


def abs2(b: Builder, x):
    """|x|^2, real."""
    if is_complex(x):
        re, im = b.real(x), b.imag(x)
        return b.add(b.multiply(re, re), b.multiply(im, im))
    return b.multiply(x, x)


def transpose(b: Builder, x):
    r = x.shape.rank
    return b.transpose(x, dimensions=tuple(range(r - 2)) + (r - 1, r - 2))


def adjoint(b: Builder, x):
    return conj(b, transpose(b, x))


def bmm(b: Builder, x, y):
    """x @ y over the batch dimensions, at HIGHEST precision (as XLA's expanders ask: a
    TPU's default f32 dot rounds its operands to bf16, too coarse for a factorization)."""
    r = x.shape.rank - 2
    batch = tuple(range(r)) or None
    return b.op("dot", x, y, lhs_batch_dims=batch, rhs_batch_dims=batch,
                lhs_contracting_dims=(r + 1,), rhs_contracting_dims=(r,),
                operand_precision=(Word("highest"), Word("highest")))


def iota(b: Builder, dims, dim: int):
    return b.iota("s32", dims, dim)


def rows(b: Builder, dims):
    return iota(b, dims, len(dims) - 2)


def cols(b: Builder, dims):
    return iota(b, dims, len(dims) - 1)


def expand(b: Builder, x, dims):
    """`x` (the same rank as `dims`, with size-1 dimensions where it is to be repeated)
    broadcast to `dims`."""
    keep = [k for k, d in enumerate(x.shape.dims) if d != 1 or dims[k] == 1]
    flat = b.reshape(x, [x.shape.dims[k] for k in keep])
    return b.broadcast(flat, dims, keep)


def dslice(b: Builder, x, starts, sizes):
    """x[starts : starts + sizes]; `starts` are s32 scalars or ints."""
    idx = [s if not isinstance(s, (int, np.integer)) else const(b, s, "s32") for s in starts]
    return b.dynamic_slice(x, *idx, dynamic_slice_sizes=tuple(sizes))


def dupdate(b: Builder, x, update, starts):
    idx = [s if not isinstance(s, (int, np.integer)) else const(b, s, "s32") for s in starts]
    return b.dynamic_update_slice(x, update, *idx)


def column(b: Builder, x, j):
    """x[..., :, j:j+1]."""
    *batch, m, _ = x.shape.dims
    return dslice(b, x, [0] * (len(batch) + 1) + [j], (*batch, m, 1))


def row(b: Builder, x, i):
    """x[..., i:i+1, :]."""
    *batch, _, n = x.shape.dims
    return dslice(b, x, [0] * len(batch) + [i, 0], (*batch, 1, n))


def entry(b: Builder, x, i, j):
    """x[..., i:i+1, j:j+1]."""
    batch = x.shape.dims[:-2]
    return dslice(b, x, [0] * len(batch) + [i, j], (*batch, 1, 1))


def eye(b: Builder, etype: str, dims):
    return as_type(b, b.convert(cmp(b, rows(b, dims), cols(b, dims), "EQ"), REAL_OF[etype]),
                   etype)


def zeros(b: Builder, etype: str, dims):
    return b.broadcast(const(b, 0, etype), dims)


def reduce_dims(b: Builder, x, dimensions, opcode: str = "add"):
    etype = x.shape.element_type
    if opcode in ("maximum", "minimum"):
        big = np.inf if etype[0] == "f" else np.iinfo(dtypes.to_dtype(etype)).max
        init = -big if opcode == "maximum" else big
    else:
        init = {"add": 0, "and": True, "or": False}[opcode]
    # A builder with no uniquer (check-plugins') leaves names to us: XLA's parser refuses
    # two computations of one name.
    name = f"{opcode}_{etype}" if b._uniq else b._name(f"{opcode}_{etype}")
    comp = b.scalar_computation(name, opcode, etype)
    return b.reduce(x, const(b, init, etype), dimensions, comp)


def while_loop(b: Builder, state: list, cond_fn, body_fn, name: str = "loop") -> list:
    """HLO while over the tuple `state`: `cond_fn(cb, values) -> pred[]`,
    `body_fn(sb, values) -> new values`, each building in its own child Builder."""
    tshape = Shape.tuple_of([v.shape for v in state])
    base = b._name(name)
    comps = []
    for part, fn in (("cond", cond_fn), ("body", body_fn)):
        sb = Builder(name_hint=f"{base}.{part}", uniquer=b._uniq)
        p = sb.parameter(0, tshape)
        vals = [sb.get_tuple_element(p, k) for k in range(len(state))]
        out = fn(sb, vals)
        root = sb.tuple(*out) if part == "body" else out
        b.computations.extend(sb.computations)  # nested loops' and reducers' computations
        comps.append(Computation(b._uniq(f"{base}.{part}") if b._uniq else f"{base}.{part}",
                                 sb.instructions, root))
    b.computations.extend(comps)
    w = b.op("while", b.tuple(*state), condition=comps[0], body=comps[1])
    return [b.get_tuple_element(w, k) for k in range(len(state))]


def fori(b: Builder, n: int, state: list, body_fn, name: str = "fori", start: int = 0,
         consts: list = ()) -> list:
    """for i in range(start, n): state = body_fn(sb, i, state, consts); i is an s32
    scalar.  A loop body sees only its parameter, so the loop-invariant values it reads
    (`consts`) ride along in the state unchanged."""
    if n <= start:  # never runs; its body may not even build (a slice of an empty matrix)
        return list(state)
    nc = len(consts)

    def cond(cb, vals):
        return cmp(cb, vals[0], const(cb, n, "s32"), "LT")

    def body(sb, vals):
        inv = list(vals[1:1 + nc])
        new = body_fn(sb, vals[0], list(vals[1 + nc:]), inv)
        return [sb.add(vals[0], const(sb, 1, "s32")), *inv, *new]
    out = while_loop(b, [const(b, start, "s32"), *consts, *state], cond, body, name)
    return out[1 + nc:]
