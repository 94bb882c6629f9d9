"""The `xlaplug.mpi.*` handler's compiled hot path: a numba @cfunc that serves a core
all-reduce's repeated calls with no Python and no GIL in the call (mpi_sites.py arms it).

Through the Python handler a 1 MiB all-reduce cost ~15-25 us a call more than mpi4py's
`comm.Allreduce` (reading the frame in ctypes, the order token, `np.errstate`, the
header swap's Python around its persistent requests).  Here a call reads its `run`,
`index` and `sites` attributes, finds its site's record (int64 slots, `R_*`: made by
mpi_sites.arm from the transport's own communicator, header template and persistent
requests), stamps the header's counters, swaps the headers (MPI_Startall, then MPI_Testall
polled), compares them, moves the payload as MpiTransport.allreduce_one would -- up to
64 KiB with the header, reduced here in rank order with numpy's ufuncs' arithmetic (the
same bits); up to 4 MiB one MPI_Iallreduce polled with MPI_Test; above, every member
having arrived, one MPI_Allreduce -- into XLA's result buffer, and passes the order token.

MPI is called through external symbols (`xlaplug_MPI_*`) that mpi_sites.bind_symbols
points at the libmpi mpi4py loaded, so the machine code holds no address of a process
and is kept on disk (numba's cache, as handler_cache.py does).  Handles travel as int64:
MPICH's are C ints and Open MPI's pointers; on the LP64 targets numba runs on, an int
argument passed in a 64-bit slot reads its low 32 bits.

Whatever is not the plain case goes back to Python, through `PYTHON` (the whole call:
a site not armed, a new big buffer to give huge pages, overlapping buffers) or `RESUME`
(the call under way: mpi_sites.resume finishes it) -- a wait past the first ~20 ms of
polling or with a control message waiting (the timeout, aborts and status queries are
PolledWaits': its timeout counts from there, as the Python path's counts from the end of its
first polls), headers that differ, an MPI error.  So every error is raised by the
transport's own Python and reads as it does there, one line (numba cfuncs cannot raise).
"""
from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from . import abi
from .nopython import answer_metadata, as_int, as_ptr, find_attr, load_i32, load_i64

# A site's record: int64 slots.
(R_ARMED, R_KIND, R_CALL, R_SEQ_AT, R_NREQS, R_REQS, R_MEMBERS, R_ME, R_BOXES, R_NBYTES,
 R_COUNT, R_DTYPE, R_OP, R_MPI_DT, R_MPI_OP, R_COMM, R_CTL, R_REQ, R_FLAG, R_TS, R_TS_NS,
 R_STATUS, R_IN, R_OUT, R_TIN, R_TOUT, R_ERR, R_TAKEN, R_SEEN) = range(29)
SEEN = 8  # big buffers' addresses already given huge pages (R_SEEN ...)
SLOTS = R_SEEN + SEEN
CARRIED, POSTED, BLOCKING = 0, 1, 2  # R_KIND
ADD, MULTIPLY, MINIMUM, MAXIMUM = 0, 1, 2, 3  # R_OP
HEADER_BYTES, AGREE_BYTES, BIG_BYTES = 128, 24, 4 << 20  # mpi_headers; huge_pages.FROM_BYTES
# The registry (one per handler): row 0 (ANY_SOURCE, ANY_TAG, -, -); row 1 + run % REGISTRY:
# (run, its records' address, their count, -).
REGISTRY = 256
# RESUME's codes: what is under way.
HEADERS, HEADERS_FAILED, DIFFER, PAYLOAD, FAILED = 1, 2, 3, 4, 5
FAST_POLLS, SPIN_NS, CONTROL_EVERY = 64, 20_000_000, 256  # as PolledWaits._poll

_i32, _i64, _p = types.int32, types.int64, types.voidptr
_startall = types.ExternalFunction("xlaplug_MPI_Startall", _i32(_i32, _p))
_testall = types.ExternalFunction("xlaplug_MPI_Testall", _i32(_i32, _p, _p, _p))
_test = types.ExternalFunction("xlaplug_MPI_Test", _i32(_p, _p, _p))
_iallreduce = types.ExternalFunction("xlaplug_MPI_Iallreduce",
                                     _i32(_p, _p, _i32, _i64, _i64, _i64, _p))
_allreduce = types.ExternalFunction("xlaplug_MPI_Allreduce", _i32(_p, _p, _i32, _i64, _i64, _i64))
_iprobe = types.ExternalFunction("xlaplug_MPI_Iprobe", _i32(_i32, _i32, _i64, _p, _p))
_yield = types.ExternalFunction("xlaplug_sched_yield", _i32())
_clock = types.ExternalFunction("xlaplug_clock_gettime", _i32(_i32, _p))
PYTHON = types.ExternalFunction("xlaplug_mpi_python", _p(_p))
RESUME = types.ExternalFunction("xlaplug_mpi_resume", _p(_p, _i64, _i64))
SYMBOLS = ("MPI_Startall", "MPI_Testall", "MPI_Test", "MPI_Iallreduce", "MPI_Allreduce",
           "MPI_Iprobe")

_SITES = np.frombuffer(b"sites", np.uint8)
_RUN = np.frombuffer(b"run", np.uint8)
_INDEX = np.frombuffer(b"index", np.uint8)


@njit
def _i64_attr(frame, name):
    kind, at = find_attr(frame, name)
    if kind != abi.ATTR_SCALAR or load_i32(at, abi.SCALAR_DTYPE) != 5:  # s64
        return -1
    return load_i64(load_i64(at, abi.SCALAR_VALUE), 0)


@njit
def _now(rec, at):
    _clock(1, as_ptr(at + 8 * R_TS))  # CLOCK_MONOTONIC, as time.monotonic
    return rec[R_TS] * 1_000_000_000 + rec[R_TS_NS]


@njit
def _poll(rec, at, single, ctl, any_source, any_tag):
    """0 once the requests completed, an MPI error code, or -1: hand the wait to Python."""
    flag = at + 8 * R_FLAG
    status = as_ptr(rec[R_STATUS])
    spins = 0
    start = np.int64(0)
    while True:
        rec[R_FLAG] = 0
        if single:
            err = _test(as_ptr(at + 8 * R_REQ), as_ptr(flag), status)
        else:
            err = _testall(np.int32(rec[R_NREQS]), as_ptr(rec[R_REQS]), as_ptr(flag), status)
        if err != 0:
            return np.int64(err)
        if load_i32(flag, 0) != 0:
            return np.int64(0)
        spins += 1
        if spins == FAST_POLLS:
            start = _now(rec, at)
        elif spins > FAST_POLLS:
            if spins % CONTROL_EVERY == 0:
                rec[R_FLAG] = 0
                _iprobe(np.int32(any_source), np.int32(any_tag), ctl, as_ptr(flag), status)
                if load_i32(flag, 0) != 0:
                    return np.int64(-1)
            if _now(rec, at) - start > SPIN_NS:
                return np.int64(-1)
        _yield()


@njit
def combine(a, b, op):
    """numpy's add, multiply, minimum, maximum of two scalars of one dtype (NaNs and equal
    operands as numpy's loops treat them: the first NaN, else the second of equals)."""
    if op == ADD:
        return a + b
    if op == MULTIPLY:
        return a * b
    if a != a:
        return a
    if b != b:
        return b
    if op == MINIMUM:
        return a if a < b else b
    return a if a > b else b


@njit
def reduce_boxes(out, boxes, members, op):
    """out = box 0 (op) box 1 (op) ... in rank order, elementwise (the boxes' payloads)."""
    n = out.size
    first = carray(as_ptr(boxes[0] + HEADER_BYTES), n, out.dtype)
    second = carray(as_ptr(boxes[1] + HEADER_BYTES), n, out.dtype)
    for i in range(n):
        out[i] = combine(first[i], second[i], op)
    for j in range(2, members):
        more = carray(as_ptr(boxes[j] + HEADER_BYTES), n, out.dtype)
        for i in range(n):
            out[i] = combine(out[i], more[i], op)


@njit
def _reduce(rec, out):
    boxes = carray(as_ptr(rec[R_BOXES]), rec[R_MEMBERS], np.int64)
    n, code, op, members = rec[R_COUNT], rec[R_DTYPE], rec[R_OP], rec[R_MEMBERS]
    if code == 11:
        reduce_boxes(carray(as_ptr(out), n, np.float32), boxes, members, op)
    elif code == 12:
        reduce_boxes(carray(as_ptr(out), n, np.float64), boxes, members, op)
    elif code == 4:
        reduce_boxes(carray(as_ptr(out), n, np.int32), boxes, members, op)
    else:
        reduce_boxes(carray(as_ptr(out), n, np.int64), boxes, members, op)


@njit
def _seen(rec, addr):
    for k in range(SEEN):
        if rec[R_SEEN + k] == addr:
            return True
    return False


@njit
def _all_reduce(frame_p, frame, registry):
    """None (0) or what PYTHON / RESUME answered: an XLA_FFI_Error*, or 0."""
    run, index = _i64_attr(frame, _RUN), _i64_attr(frame, _INDEX)
    if run < 0 or index < 0:
        return PYTHON(frame_p)
    reg = carray(as_ptr(registry), (REGISTRY + 1) * 4, np.int64)
    row = 4 * (1 + run % REGISTRY)
    if reg[row] != run or index >= reg[row + 2]:
        return PYTHON(frame_p)
    at = reg[row + 1] + 8 * SLOTS * index
    rec = carray(as_ptr(at), SLOTS, np.int64)
    if rec[R_ARMED] == 0 or load_i64(frame, abi.FRAME_ARGS_SIZE) != 2 or \
            load_i64(frame, abi.FRAME_RETS_SIZE) != 2:
        return PYTHON(frame_p)
    args, rets = load_i64(frame, abi.FRAME_ARGS), load_i64(frame, abi.FRAME_RETS)
    src, out = load_i64(load_i64(args, 0), abi.BUFFER_DATA), \
        load_i64(load_i64(rets, 0), abi.BUFFER_DATA)
    nbytes, kind = rec[R_NBYTES], rec[R_KIND]
    if kind != CARRIED and src < out + nbytes and out < src + nbytes:
        return PYTHON(frame_p)  # MPI's buffers must not overlap: the transport's own
    if nbytes >= BIG_BYTES and not (_seen(rec, src) and _seen(rec, out)):
        return PYTHON(frame_p)  # its views give new big buffers huge pages (huge_pages.py)
    rec[R_IN], rec[R_OUT] = src, out
    rec[R_TIN] = load_i64(load_i64(args, 8), abi.BUFFER_DATA)
    rec[R_TOUT] = load_i64(load_i64(rets, 8), abi.BUFFER_DATA)
    # this call's counters, as HeaderSwaps._header stamps them
    call = rec[R_CALL]
    rec[R_CALL] = call + 1
    rec[R_TAKEN] += 1  # (the calls this handler took: what the tests count)
    seq = carray(as_ptr(rec[R_SEQ_AT]), 1, np.int64)
    boxes = carray(as_ptr(rec[R_BOXES]), rec[R_MEMBERS], np.int64)
    mine = carray(as_ptr(boxes[rec[R_ME]]), 2, np.int64)
    mine[0], mine[1] = seq[0], call
    seq[0] += 1
    if kind == CARRIED:
        # an element loop, not `box[:] = data`: numba's slice assignment compiles its shape
        # check's error message with it (its str, repr and concatenation: ~3 s of the
        # handler's cold compile of ~5 s)
        box = carray(as_ptr(boxes[rec[R_ME]] + HEADER_BYTES), nbytes, np.uint8)
        data = carray(as_ptr(src), nbytes, np.uint8)
        for k in range(nbytes):
            box[k] = data[k]
    rec[R_ERR] = _startall(np.int32(rec[R_NREQS]), as_ptr(rec[R_REQS]))
    if rec[R_ERR] != 0:
        return RESUME(frame_p, at, FAILED)
    ctl, any_source, any_tag = rec[R_CTL], reg[0], reg[1]
    got = _poll(rec, at, False, ctl, any_source, any_tag)
    if got != 0:
        rec[R_ERR] = got
        return RESUME(frame_p, at, HEADERS if got < 0 else HEADERS_FAILED)
    head = carray(as_ptr(boxes[rec[R_ME]]), AGREE_BYTES, np.uint8)
    for j in range(rec[R_MEMBERS]):
        other = carray(as_ptr(boxes[j]), AGREE_BYTES, np.uint8)
        for k in range(AGREE_BYTES):
            if other[k] != head[k]:
                return RESUME(frame_p, at, DIFFER)
    if kind == CARRIED:
        _reduce(rec, out)
    elif kind == POSTED:
        rec[R_REQ] = 0
        rec[R_ERR] = _iallreduce(as_ptr(src), as_ptr(out), np.int32(rec[R_COUNT]),
                                 rec[R_MPI_DT], rec[R_MPI_OP], rec[R_COMM],
                                 as_ptr(at + 8 * R_REQ))
        if rec[R_ERR] != 0:
            return RESUME(frame_p, at, FAILED)
        got = _poll(rec, at, True, ctl, any_source, any_tag)
        if got != 0:
            rec[R_ERR] = got
            return RESUME(frame_p, at, PAYLOAD if got < 0 else FAILED)
    else:
        rec[R_ERR] = _allreduce(as_ptr(src), as_ptr(out), np.int32(rec[R_COUNT]),
                                rec[R_MPI_DT], rec[R_MPI_OP], rec[R_COMM])
        if rec[R_ERR] != 0:
            return RESUME(frame_p, at, FAILED)
    tin = carray(as_ptr(rec[R_TIN]), 1, np.uint32)
    carray(as_ptr(rec[R_TOUT]), 1, np.uint32)[0] = tin[0] + np.uint32(1)
    return as_ptr(0)


def handler(frame_p):
    """The XLA_FFI_Handler of every `xlaplug.mpi.*` target (compiled by mpi_sites.compile)."""
    frame = as_int(frame_p)
    if load_i64(frame, abi.FRAME_EXTENSION) != 0:
        if answer_metadata(frame) != 0:
            return PYTHON(frame_p)  # (an API version we were not written for: its error)
        return as_ptr(0)
    if load_i32(frame, abi.FRAME_STAGE) != abi.STAGE_EXECUTE:
        return as_ptr(0)
    registry = _i64_attr(frame, _SITES)
    if registry <= 0:  # not a call of an MPI program's (xlaplug.jax.op's calls): Python's
        return PYTHON(frame_p)
    return _all_reduce(frame_p, frame, registry)
