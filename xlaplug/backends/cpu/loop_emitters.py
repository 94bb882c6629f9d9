"""Loop code (loop_codegen.py) of the data-movement ops: broadcast, slice, transpose, iota,
concatenate, dynamic-slice and dynamic-update-slice, each a loop nest writing its buffer
(a dynamic-update-slice of a state leaf the body owns writes into that leaf); and `outline`,
which moves the body's element loops that call XLA's transcendentals into functions of their
own."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ...hlo.ir import Instruction
from .jit_drivers import numba_dtype
from .loop_index import _dims, _lin
from . import trig_vector

if TYPE_CHECKING:
    from .loop_codegen import ArrayCodegen


def _broadcast(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    bd = list(ins.attrs.get("dimensions", ()))
    cg._mapped(ins, name, cg._operand(ins, 0, [f"j{d}" for d in bd]))


def _slice(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    sl = ins.attrs["slice"].dims
    cg._mapped(ins, name, cg._operand(ins, 0, [f"{s.start} + j{d} * {s.stride}"
                                              for d, s in enumerate(sl)]))


def _transpose(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    perm = list(ins.attrs["dimensions"])
    idx = [""] * len(perm)
    for j, p in enumerate(perm):  # output dimension j is operand dimension perm[j]
        idx[p] = f"j{j}"
    cg._mapped(ins, name, cg._operand(ins, 0, idx))


def _iota(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    d = int(ins.attrs.get("iota_dimension", 0))
    cg._mapped(ins, name, f"np.{numba_dtype(ins.shape.dtype).name}(j{d})")


def _concatenate(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    cd = int(ins.attrs["dimensions"][0])
    dims = _dims(ins)
    cg._alloc(ins, name)
    idx = [f"j{d}" for d in range(len(dims))]
    body, off = [], 0
    for k, o in enumerate(ins.operands):
        size = int(o.shape.dims[cd])
        src = list(idx)
        src[cd] = f"j{cd} - {off}"
        kw = "if" if k == 0 else "elif"
        body += [f"{kw} j{cd} < {off + size}:",
                 f"    {name}[{_lin(idx, dims)}] = {cg._operand(ins, k, src)}"]
        off += size
    cg._nest(dims, body)


def _dynamic_slice(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    x = ins.operands[0]
    sizes = _dims(ins)
    st = cg._start_indices(ins, 1, [int(e) - s for e, s in zip(x.shape.dims, sizes)])
    cg._mapped(ins, name, cg._operand(ins, 0, [f"{s} + j{d}" for d, s in enumerate(st)]))


def _dynamic_update_slice(cg: ArrayCodegen, ins: Instruction, name: str) -> None:
    x, u = ins.operands[0], ins.operands[1]
    st = cg._start_indices(ins, 2, [int(e) - int(s) for e, s in zip(x.shape.dims, u.shape.dims)])
    leaf = cg._in_place.get(id(ins))
    if leaf is not None:  # into the state leaf itself (the loop's own copy of it)
        cg.owned.add(leaf)
        name = cg.names[id(x)]
    else:
        cg._alloc(ins, name)
        # an element loop, not `name[:] = x`: numba's slice assignment compiles its shape
        # check's error message (~1-2 s of CPU in a process: compiled_while._copy)
        cg.lines.append(f"for k in range({x.shape.num_elements()}): "
                        f"{name}[k] = {cg.names[id(x)]}[k]")
    idx = [f"j{d}" for d in range(u.shape.rank)]
    dst = _lin([f"{s} + j{d}" for d, s in enumerate(st)], x.shape.dims)
    cg._nest(tuple(u.shape.dims), [f"{name}[{dst}] = {cg.names[id(u)]}[{_lin(idx, u.shape.dims)}]"])
    return name


EMITTERS = {"broadcast": _broadcast, "slice": _slice, "transpose": _transpose,
            "iota": _iota, "concatenate": _concatenate, "dynamic-slice": _dynamic_slice,
            "dynamic-update-slice": _dynamic_update_slice}


# ---- element loops in functions of their own ----------------------------------------
# Element loops of a loop computation (loop_codegen.py) moved into functions of their own.
#
# numba compiles a loop's condition and body into `run`, one LLVM function; an element loop
# there that calls XLA's transcendentals (exp, tanh, ... the SCALAR_OPS templates, written to
# vectorize) stays scalar -- measured (CPU time, 2-core dev host, 2026-12-06) on an LSTM
# cell's body: its 512-element sigmoid/tanh loops cost 16 ns an exp inside the body, 2 ns
# in a function of their own, where LLVM vectorizes them.  So each top-level
# `for o in range(n):` loop of the body whose text calls a template becomes
#
#     def bE3(v23, v14, v27):              # in the module's pieces, njit
#         for o in range(512):
#             ...                          # the same lines
#     ...
#     bE3(v23, v14, v27)                   # in the body
#
# The lines are the same, so the values are the same, bit for bit.  Loops of plain
# arithmetic (adds, copies) stay in place: they vectorize there already, and each function
# of its own costs numba compile time.

# The arrays an element loop reads or writes: state leaves, values, buffers of inlined
# computations (loop_codegen's names: p0.., v12, v31_17); constants (bK0) and templates
# (_xexp32) are module globals.
_ARRAY = re.compile(r"\b(p\d+|v\d+(?:_\d+)*)\b")
_CALL = re.compile(r"\b_x\w+\(")
_PLAIN = {"_xftz32", "_xftz64", "_xftzr32", "_xftzr64", "_xftzd32", "_xftzd64", "_xfma32",
          "_xfma64"}


INLINE_ELEMENTS = 64


def _elements(block: list[str]) -> int:
    """The iterations of an element loop (`for o in range(n):`, or rows and columns)."""
    n = 1
    for ln in block[:2]:
        m = re.match(r"\s*for [or] in range\((\d+)\):$", ln) or \
            (re.match(r"\s*for c in range\((\d+)\):$", ln) if ln is block[1] else None)
        n *= int(m.group(1)) if m else 1
    return n


def _calls_template(block: list[str]) -> bool:
    return any(m.group(0)[:-1] not in _PLAIN for ln in block for m in _CALL.finditer(ln))


def outline(lines: list[str], pieces: list[str], prefix: str) -> list[str]:
    """`lines` with each top-level element loop that calls a template replaced by a call
    of a function appended to `pieces` (see the module docstring)."""
    out: list[str] = []
    k = 0
    while k < len(lines):
        ln = lines[k]
        end = k + 1
        if ln.startswith(("for o in range(", "for r in range(")):
            while end < len(lines) and lines[end].startswith("    "):
                end += 1
        block = lines[k:end]
        if len(block) == 1 or not _calls_template(block):
            out += block
            k = end
            continue
        # Sines and cosines in vector code, with a libm rerun for far arguments, where this
        # process's libm is glibc's FMA sinf (trig_vector.py).
        short = _elements(block) <= INLINE_ELEMENTS
        if trig_vector.vector_trig_ok():
            block = trig_vector.far_loop(block) or block
        args = list(dict.fromkeys(m.group(1) for b in block[1:] for m in _ARRAY.finditer(b)))
        fn = f"{prefix}E{len(pieces)}"
        # A short loop's function is inlined back into its caller in numba's IR: its call
        # cost as much as its work (the scan RNN's 64 tanh: a step 180 -> 153 ns; the
        # benchmark fori_loop's 16 sines and cosines 57 -> 42 ns, CPU time, 2026-12-06),
        # and inlined it still vectorizes, the templates being inlined into it alike.
        how = ', inline="always"' if short else ""
        pieces.append("\n".join(["from xlaplug.backends.cpu.jit_options import callee_njit as _njit",
                                 f"def {fn}({', '.join(args)}):",
                                 *("    " + b for b in block),
                                 f'{fn} = _njit(nogil=True, error_model="numpy"{how})({fn})',
                                 ""]))
        out.append(f"{fn}({', '.join(args)})")
        k = end
    return out
