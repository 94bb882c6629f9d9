"""Plugin kernels served inside XLA through its typed FFI (issue 22).

    abi.py              the C ABI of xla/ffi/api/c_api.h: layouts, codes, API version
    decode.py           a call frame read from Python: zero-copy buffers, typed attributes
    python_handler.py   the handler that enters Python (any kernel)
    nopython.py         the call frame read in nopython mode (numba intrinsics and helpers)
    compiled_handler.py the numba @cfunc handler of an @njit kernel: no Python, no GIL
    register.py         registration with jax's CPU backend, and its report
    bound_handler.py    what xlaplug's own targets' handlers share: programs bound by key
    mpi_frames.py       their call frames read in a few ctypes steps (the hot path)
    huge_pages.py       huge pages for XLA's big buffers a collective moves
    mpi_handler.py      the `xlaplug.mpi.*` targets: a rank's collectives over MPI
    override_handler.py the `xlaplug.override` target: core opcodes a plugin overrides
    devices_handler.py  `xlaplug.devices.kernel`: communicator kernels across XLA's host devices

`xlaplug.jax.register(plugins)` is the public entry point.
"""
from .abi import FfiError
from .register import COMPILED, NOT_SERVED, PYTHON, Report, Served, register_op, register_registry

__all__ = ["COMPILED", "NOT_SERVED", "PYTHON", "FfiError", "Report", "Served", "register_op",
           "register_registry"]
