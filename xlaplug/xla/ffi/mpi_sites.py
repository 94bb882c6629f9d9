"""The Python side of the compiled MPI handler (mpi_native.py): compiling it, arming a call
site's record for it, keeping the transport's counters in step with it, and finishing the
calls it hands back.

A site is armed after its first call of a run, which the Python handler serves as ever
(mpi_handler.py): the transport then holds the site's communicator and header template,
so the record gets them, with persistent header requests of its own, and from the next
call on the cfunc serves the site.  Only the plain core all-reduce qualifies: one operand
of f32, f64, s32 or s64 (the types the cfunc reduces), a sum, product, min or max (MPI's
ops: `_native_op`), no plugin override, an MPI transport, at least two members.  The rest
-- other collectives (all-gather and the data movers pickle their payloads), other dtypes
(bf16 and f16 are no MPI types: the transport gathers and reduces them in Python), plugin
communicator kernels, calls of `xlaplug.jax.op` -- stays on the Python handler.

The counters the headers carry are the transport's (MpiTransport.counters): a
communicator's sequence and an instruction's call number.  The cfunc counts in the records
(a cell per communicator, a slot per site); every Python entry for the binding copies them
into the transport first and back after (`synced`), so the two paths number one sequence.
"""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np

from . import mpi_frames
from . import mpi_native as N

_CODES = {np.dtype(np.float32): 11, np.dtype(np.float64): 12, np.dtype(np.int32): 4,
          np.dtype(np.int64): 5}
_OPS = {"add": N.ADD, "multiply": N.MULTIPLY, "minimum": N.MINIMUM, "maximum": N.MAXIMUM}
RESUME = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def compile_handler(python_address: int, resume_address: int):
    """The cfunc (numba CFunc), its external symbols bound to this process's libmpi (the
    one mpi4py loaded), libc and the two Python callbacks; its machine code loaded from
    xlaplug's cache directory when a process compiled it before."""
    import llvmlite.binding as llvm
    from numba.core import sigutils
    from numba.core.ccallback import CFunc
    from numba.core.compiler_lock import global_compiler_lock

    from ...backends.spmd.mpi import mpi_module
    from .handler_cache import SIGNATURE, compile_once
    mpi = ctypes.CDLL(mpi_module().__file__)  # (dlsym searches its libmpi too)
    libc = ctypes.CDLL(None)
    symbols = {f"xlaplug_{n}": getattr(mpi, n) for n in N.SYMBOLS}
    symbols.update(xlaplug_sched_yield=libc.sched_yield, xlaplug_clock_gettime=libc.clock_gettime)
    with global_compiler_lock:
        for name, fn in symbols.items():
            llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)
        llvm.add_symbol("xlaplug_mpi_python", python_address)
        llvm.add_symbol("xlaplug_mpi_resume", resume_address)
        cf = CFunc(N.handler, sigutils.normalize_signature(SIGNATURE), locals={},
                   options={"nopython": True})
        try:
            cf._cache = _cache(N.handler)
        except RuntimeError:  # no usable cache directory: compiled in every process
            pass
        compile_once(cf)
    return cf


def _cache(fn):
    """numba's cache of `fn` (xlaplug's sealed files), its entries keyed by the bytes of the
    files whose code the cfunc holds too (numba keys a function by its own file alone)."""
    import hashlib
    from pathlib import Path

    from ...backends.cpu.jit_numba_cache import HealingCache
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(b"".join((here / f).read_bytes() for f in (
        "abi.py", "nopython.py", "mpi_native.py"))).hexdigest()

    class Cache(HealingCache):
        def _index_key(self, sig, codegen):
            return (*super()._index_key(sig, codegen), digest)
    return Cache(fn)


def new_registry(MPI) -> np.ndarray:
    reg = np.zeros((N.REGISTRY + 1, 4), np.int64)
    reg[0, :2] = MPI.ANY_SOURCE, MPI.ANY_TAG
    return reg


def enrol(registry: np.ndarray, key: int, binding) -> bool:
    """The binding's records in the registry (made once, a row per call index); False when
    another live binding holds the row (then its calls stay on the Python handler)."""
    row = registry[1 + key % N.REGISTRY]
    if row[0] not in (0, key):
        return False
    if binding.records is None:
        binding.records = np.zeros((len(binding.instructions), N.SLOTS), np.int64)
    row[:3] = key, binding.records.ctypes.data, len(binding.records)
    return True


def leave(registry: np.ndarray, key: int) -> None:
    row = registry[1 + key % N.REGISTRY]
    if row[0] == key:
        row[:] = 0


def disarm(binding) -> None:
    """A new run (a new transport): every site is served by Python until armed again."""
    if binding.records is not None:
        binding.records[:, N.R_ARMED] = 0
    binding.armed.clear()
    binding.cells.clear()


class Armed:
    """What Python keeps of an armed site: the instruction, its group and communicator, the
    members' message buffers and the persistent requests the record names, and the
    transport's finisher for the calls the cfunc hands back (`resume`)."""

    def __init__(self, t, ins, group, comm, op, a, out, rec, cell):
        MPI = t.MPI
        self.t, self.ins, self.group, self.comm = t, ins, group, comm
        me, self.dtype, mpi_op = group.index(t.rank), a.dtype, t.mpi_op(op)
        from ...backends.spmd.mpi_allreduce import WITH_HEADER_BYTES
        nbytes = a.nbytes
        kind = N.CARRIED if nbytes <= WITH_HEADER_BYTES else \
            N.POSTED if nbytes < t.ONE_CALL_BELOW_BYTES else N.BLOCKING
        skip = N.HEADER_BYTES
        self.boxes = [np.zeros(skip + (nbytes if kind == N.CARRIED else 0), np.uint8)
                      for _ in group]
        self.boxes[me][:skip] = np.frombuffer(t.header_template(ins, op), np.uint8)
        others = [j for j in range(len(group)) if j != me]
        from ...backends.spmd.mpi_headers import _HEAD_TAG
        self.reqs = [comm.Recv_init(self.boxes[j], source=j, tag=_HEAD_TAG) for j in others] + \
            [comm.Send_init(self.boxes[me], dest=j, tag=_HEAD_TAG) for j in others]
        width = np.uint32 if MPI._sizeof(MPI.Request) == 4 else np.uint64
        mask = (1 << (8 * np.dtype(width).itemsize)) - 1
        self.handles = np.array([MPI._handleof(r) & mask for r in self.reqs], width)
        self.box_at = np.array([b.ctypes.data for b in self.boxes], np.int64)
        self.status = np.zeros((len(self.reqs) + 1) * MPI._sizeof(MPI.Status), np.uint8)
        self.cell, self.rec = cell, rec
        rec[:] = 0
        rec[[N.R_KIND, N.R_SEQ_AT, N.R_NREQS, N.R_REQS, N.R_MEMBERS, N.R_ME, N.R_BOXES,
             N.R_NBYTES, N.R_COUNT, N.R_DTYPE, N.R_OP, N.R_STATUS]] = \
            (kind, cell.ctypes.data, len(self.reqs), self.handles.ctypes.data, len(group),
             me, self.box_at.ctypes.data, nbytes, a.size, _CODES[a.dtype], _OPS[op],
             self.status.ctypes.data)
        h = (lambda obj: MPI._handleof(obj) & mask)
        rec[[N.R_MPI_DT, N.R_MPI_OP, N.R_COMM, N.R_CTL]] = \
            (h(MPI._typedict[a.dtype.char]), h(mpi_op), h(comm), h(t.ctl))
        self.seen(a.ctypes.data, out.ctypes.data)
        self.finish = t.allreduce_finisher(comm, ins, group, mpi_op)
        rec[N.R_CALL] = t.counters()[1].get(ins.name, 0)
        rec[N.R_ARMED] = 1

    def seen(self, *addresses) -> None:
        """Buffers Python has seen (given huge pages where big): the cfunc serves them."""
        rec = self.rec
        for a in addresses:
            if a not in rec[N.R_SEEN:N.R_SEEN + N.SEEN]:
                rec[N.R_SEEN:N.R_SEEN + N.SEEN] = np.roll(rec[N.R_SEEN:N.R_SEEN + N.SEEN], 1)
                rec[N.R_SEEN] = a


def arm(binding, index: int, ins, ctx, args: list, results: list) -> None:
    """After a Python call of site `index`: its record, where the cfunc can serve it."""
    if binding.records is None or index in binding.armed:
        return
    from ...backends.spmd.all_reduce import place_of, reduce_plan
    if ins.opcode not in ("all-reduce", "all-reduce-start") or len(args) != 1 or \
            len(results) != 1 or args[0].dtype not in _CODES or \
            results[0].dtype != args[0].dtype or results[0].size != args[0].size or \
            (ctx.overrides is not None and ctx.overrides(ins) is not None):
        return
    place = place_of(ctx)
    t = place.transport
    if t is None or not hasattr(t, "allreduce_one") or place.grid.count == 1:
        return
    plan = reduce_plan(ins, ctx, place)
    if plan.op is None or len(plan.group) < 2 or t.header_template(ins, plan.op) is None:
        return
    comm = t.communicator(ins, plan.group)
    cell = binding.cells.get(id(comm))
    if cell is None:
        cell = binding.cells[id(comm)] = np.array([t.counters()[0].get(id(comm), 0)], np.int64)
    binding.armed[index] = Armed(t, ins, plan.group, comm, plan.op, args[0], results[0],
                                 binding.records[index], cell)


@contextlib.contextmanager
def synced(binding):
    """The transport's counters as the cfunc left them, and the records' as Python leaves
    them (around every Python entry for a binding with armed sites)."""
    if not binding.armed:
        yield
        return
    site = next(iter(binding.armed.values()))
    seqs, calls = site.t.counters()
    comms = {id(s.comm): s.comm for s in binding.armed.values()}
    for cid, cell in binding.cells.items():
        seqs[cid] = int(cell[0])
    for s in binding.armed.values():
        calls[s.ins.name] = int(s.rec[N.R_CALL])
    try:
        yield
    finally:
        for cid, cell in binding.cells.items():
            if cid in comms:
                cell[0] = seqs.get(cid, 0)
        for s in binding.armed.values():
            s.rec[N.R_CALL] = calls.get(s.ins.name, 0)


def resume(site: Armed, code: int) -> None:
    """Finishes the call the cfunc handed back (`code`: what was under way) with the
    transport's own finisher (MpiTransport.allreduce_finisher), raising what it raises:
    the headers still to wait for (HEADERS), cut short (HEADERS_FAILED) or disagreeing
    (DIFFER), or the posted payload still to wait for (PAYLOAD)."""
    t, rec = site.t, site.rec
    MPI = t.MPI
    call = int(rec[N.R_CALL]) - 1
    t.where = (site.ins, call)
    src = np.ctypeslib.as_array((ctypes.c_char * int(rec[N.R_NBYTES])).from_address(
        int(rec[N.R_IN]))).view(site.dtype)
    out = np.ctypeslib.as_array((ctypes.c_char * int(rec[N.R_NBYTES])).from_address(
        int(rec[N.R_OUT]))).view(site.dtype)
    if code == N.FAILED:
        raise MPI.Exception(int(rec[N.R_ERR]))
    failed = MPI.Exception(int(rec[N.R_ERR])) if code == N.HEADERS_FAILED else None
    posted = None
    if code == N.PAYLOAD:
        width = 4 if MPI._sizeof(MPI.Request) == 4 else 8
        posted = MPI.Request.fromhandle(int(rec[N.R_REQ]) & ((1 << (8 * width)) - 1))
    site.finish(call, site.boxes, site.reqs, code == N.DIFFER, src, out, failed, posted)
    mpi_frames.pass_order(int(rec[N.R_TIN]), int(rec[N.R_TOUT]))
