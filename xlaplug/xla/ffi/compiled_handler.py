"""The compiled handler: a numba @cfunc, generated per op, that serves a kernel numba
compiled in nopython mode with no Python and no GIL in the call path.

A kernel qualifies when it is a numba CPU dispatcher (`@njit`) with signatures -- given
explicitly, `@njit(["void(float32[:, ::1], float32[::1], float32[:, ::1], float32)"])`, or
compiled already -- that return nothing.  Each signature, for each way its leading arrays
can be the call's operands and results, is one branch of the handler: it checks the call
frame's buffer count, dtypes and ranks and the attributes' types, views the buffers with
`numba.carray` (C-contiguous, not copied) and calls the kernel's compiled code.

Everything else goes to the op's Python handler, called through its function pointer:
a call no branch matches (another dtype or rank, a string or dictionary attribute), a
missing or mistyped attribute, and a kernel that raised -- numba cannot hand the message
of a nopython exception to the cfunc, so the Python handler runs the kernel again from
Python, where the exception carries its message into the XLA error.  The handler reaches
it through an external symbol, not a constant address, so that its machine code can be
kept on disk and loaded by later processes (handler_cache.py).
"""
from __future__ import annotations

import inspect

import numpy as np
from numba import types

from . import abi

_CODES = {types.float32: 11, types.float64: 12, types.int8: 2, types.int16: 3,
          types.int32: 4, types.int64: 5, types.uint8: 6, types.uint16: 7, types.uint32: 8,
          types.uint64: 9, types.boolean: 1, types.complex64: 15, types.complex128: 18}


def why_not_compiled(fn) -> str | None:
    """None when `fn` can be served by a compiled handler, else the reason it cannot."""
    from numba.core.registry import CPUDispatcher
    if not isinstance(fn, CPUDispatcher):
        return "the kernel is Python code (not a numba @njit function)"
    if not fn.signatures:
        return ("the @njit kernel has no signatures (give it examples= and a shape rule, or "
                "explicit signatures)")
    if fn.targetoptions.get("parallel"):
        import numba
        from numba.np.ufunc import parallel
        parallel._launch_threads()  # XLA calls from many threads: the layer must allow it
        if numba.threading_layer() == "workqueue":
            return "a parallel kernel under numba's workqueue threading layer is not reentrant"
    if not _branches(fn):
        return "none of the kernel's signatures takes arrays and scalar attributes only"
    return None


def _params(fn) -> list[inspect.Parameter]:
    return list(inspect.signature(fn.py_func).parameters.values())


def _branches(fn) -> list[tuple[tuple, int]]:
    """(signature, number of buffers) for every branch the handler will have."""
    out = []
    params = _params(fn)
    for sig in fn.signatures:
        if len(sig) != len(params) or fn.overloads[sig].signature.return_type != types.none:
            continue
        lead = 0
        while lead < len(sig) and isinstance(sig[lead], types.Array):
            lead += 1
        for nbuf in range(1, lead + 1):
            if all(_CODES.get(t.dtype) for t in sig[:nbuf]) and \
                    all(_attr_ok(t) for t in sig[nbuf:]):
                out.append((sig, nbuf))
    return out


def _attr_ok(t) -> bool:
    if isinstance(t, types.Array):
        return t.ndim == 1 and t.dtype in _CODES
    return isinstance(t, (types.Float, types.Integer, types.Boolean))


def _branch_source(sig, nbuf, params, names: dict) -> list[str]:
    pad = "    "
    lines = [f"if n == {nbuf}:"]
    for k in range(nbuf):
        lines.append(f"{pad}b{k} = nopython.buffer_addr(frame, {k}, nargs)")
    checks = " and ".join(f"nopython.buffer_is(b{k}, {_CODES[sig[k].dtype]}, {sig[k].ndim})"
                          for k in range(nbuf))
    lines.append(f"{pad}if {checks}:")
    depth = 2
    call_args = []
    for k in range(nbuf):
        t = sig[k]
        dims = "".join(f"nopython.buffer_dim(b{k}, {i}), " for i in range(t.ndim))
        lines.append(f"{pad * depth}v{k} = carray(nopython.buffer_data(b{k}), ({dims}), "
                     f"np.{t.dtype})")
        call_args.append(f"v{k}")
    for k in range(nbuf, len(sig)):
        t, p = sig[k], params[k]
        names[f"NAME{k}"] = np.frombuffer(p.name.encode(), np.uint8).copy()
        if isinstance(t, types.Array):
            lines.append(f"{pad * depth}kind{k}, at{k} = nopython.find_attr(frame, NAME{k})")
            lines.append(f"{pad * depth}if kind{k} == {abi.ATTR_ARRAY} and "
                         f"nopython.array_is(at{k}, {_CODES[t.dtype]}):")
            depth += 1
            lines.append(f"{pad * depth}a{k} = carray(nopython.array_data(at{k}), "
                         f"nopython.array_size(at{k}), np.{t.dtype})")
        else:
            default = p.default
            has = default is not inspect.Parameter.empty and \
                isinstance(default, (bool, int, float, np.number, np.bool_))
            df, di = (float(default), int(default)) if has else (0.0, 0)
            lines.append(f"{pad * depth}ok{k}, fl{k}, f{k}, i{k} = nopython.scalar_attr("
                         f"frame, NAME{k}, {has}, {df!r}, {di})")
            if isinstance(t, types.Float):
                lines.append(f"{pad * depth}if ok{k}:")
                depth += 1
                lines.append(f"{pad * depth}a{k} = np.{t}(f{k})")
            else:
                lines.append(f"{pad * depth}if ok{k} and not fl{k}:")
                depth += 1
                conv = f"i{k} != 0" if isinstance(t, types.Boolean) else f"np.{t}(i{k})"
                lines.append(f"{pad * depth}a{k} = {conv}")
        call_args.append(f"a{k}")
    lines += [f"{pad * depth}try:",
              f"{pad * (depth + 1)}KERNEL({', '.join(call_args)})",
              f"{pad * depth}except Exception:",
              f"{pad * (depth + 1)}return PYTHON(frame_p)",
              f"{pad * depth}return nopython.as_ptr(0)"]
    return lines


def handler_source(fn, names: dict) -> str:
    """The Python source of the handler (numba compiles it as a @cfunc)."""
    params = _params(fn)
    body = ["frame = nopython.as_int(frame_p)",
            f"if nopython.load_i64(frame, {abi.FRAME_EXTENSION}) != 0:",
            "    if nopython.answer_metadata(frame) != 0:",
            "        return PYTHON(frame_p)",
            "    return nopython.as_ptr(0)",
            f"if nopython.load_i32(frame, {abi.FRAME_STAGE}) != {abi.STAGE_EXECUTE}:",
            "    return nopython.as_ptr(0)",
            f"nargs = nopython.load_i64(frame, {abi.FRAME_ARGS_SIZE})",
            f"n = nargs + nopython.load_i64(frame, {abi.FRAME_RETS_SIZE})"]
    for sig, nbuf in _branches(fn):
        body += _branch_source(sig, nbuf, params, names)
    body.append("return PYTHON(frame_p)")
    return "def handler(frame_p):\n" + "".join(f"    {line}\n" for line in body)


class CompiledHandler:
    """The compiled handler of one op; `address` is the XLA_FFI_Handler to register.  It
    holds the Python handler it falls back to, so both live as long as it does.  `cache`
    (handler_cache.HandlerCache) compiles it, or loads it from an earlier process."""

    def __init__(self, op: str, entry, python_handler, cache):
        from .handler_cache import kernel_digest, module_text
        self.op, self.entry = op, entry
        names: dict = {}
        body = handler_source(entry.fn, names)
        digest = kernel_digest(entry.fn)
        # without a digest, only this kernel object is known to be this code (the cache
        # holds it, so its id is not reused)
        kernel = digest or f"in memory, object {id(entry.fn):x}"
        self.source, key = module_text(op, entry.plugin.name, kernel, body, names)
        # the Python handler the code calls: this one, or the one of the same kernel whose
        # handler this process loaded first
        self.cfunc, self.python = cache.cfunc(key, self.source, entry.fn, python_handler,
                                              on_disk=digest is not None)
        self.address = self.cfunc.address
