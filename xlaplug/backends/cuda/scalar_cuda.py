"""Scalar code for CUDA: SCALAR_OPS expressions and HLO scalar computations as numba.cuda
device functions.

`compile_scalar_device_function(comp)` is cpu/scalar_jit.py's compile_scalar_computation for
the GPU: it turns a reducer, comparator, scatter combiner or map body (an HLO computation on
scalars) into a `numba.cuda.jit(device=True)` function taking one scalar per parameter and
returning a scalar, or a tuple of scalars for a tuple root.  The Python source is the very
source common/scalar_codegen.py generates from SCALAR_OPS (extended by CUDA_SCALAR_OPS) (so it has the CPU kernels' semantics, FMA
contraction included); only the names it calls are bound to CUDA versions:

* `np` and `math` are stand-in modules (`cuda_namespace()["np"]`): numpy's scalar types and
  constants, and device functions for the numpy/math calls numba.cuda does not lower
  (np.exp, np.floor, np.rint, np.power, np.nextafter, ...).  Each computes in float64
  (libdevice) -- as the templates already do for transcendentals -- so f32 results are a
  float64 result rounded once, like the CPU kernels'.
* the `_x...` helpers of common/scalar_{int,float,complex}.py are re-defined from
  their own source in that namespace and wrapped as device functions; the four bit-view
  helpers (`_xbits32`, ...) get libdevice versions (float_as_int, double_as_longlong ...),
  since numba.cuda has no np.empty/view.
* the `_y...` complex helpers of common/scalar_complex{,_fn}.py (XLA's complex formulas,
  the ones every path uses) join the same namespace; their libm primitives get libdevice
  versions on a GPU and Python's `math` (the CPU's libm) under the simulator.

Values travel in SCALAR_COMPUTE_DTYPES (f16 as float32 holding an f16 value, pred as bool,
the rest as themselves); a caller storing a result into an f16 array casts it (exactly).
Under numba's simulator the same names are plain Python (numpy) functions.

Device functions compile lazily, on the first launch of a kernel that calls them, and are
cached per process by their generated source (identical computations compile once).  The
returned dispatcher has `.param_types` / `.result_types` (element types), `.source` and
`.py_func` (the plain Python function, usable on the host with numpy scalars).
"""
from __future__ import annotations

import inspect
import linecache
import math
import textwrap
import types

import numpy as np

from ...hlo.ir import Computation
from ..common import scalar_complex as _SC
from ..common.scalar_ops import SCALAR_HELPER_MODULES, SCALAR_OPS, ScalarSig
from ..common import scalar_codegen
from ..common.scalar_codegen import ScalarCompileError, result_types
from .device_helpers import BIT_HELPERS as _BIT_HELPERS
from .device_helpers import GPU_BITS, GPU_LIBM, SIM_BITS, SIM_LIBM
from .launch import cached_kernel, cuda_module, simulating

__all__ = ["compile_scalar_device_function", "cuda_namespace", "ScalarCompileError"]

# numpy scalar types and constants the templates use (np.float32(...), np.inf, ...)
_NP_TYPES = ("bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "float32", "float64", "complex64", "complex128")
_NP_CONSTS = ("inf", "nan", "pi", "e")

# numpy / math functions the templates and helpers call that numba.cuda does not lower for
# scalars: float64 in, float64 out (libdevice on a GPU, numpy in the simulator).
_NP_UNARY = ("exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "floor", "ceil", "rint",
             "trunc", "exp2", "expm1", "log1p", "cbrt")
_NP_BINARY = {"fmod": "fmod", "power": "pow", "nextafter": "nextafter", "arctan2": "atan2",
              "copysign": "copysign"}
_MATH_F64 = {"atan2": "atan2", "erf": "erf"}   # math.* redirected to float64 versions

def _exec(src: str, ns: dict, label: str) -> None:
    filename = f"<xlaplug cuda helpers: {label}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)


def _stand_in_modules(sim: bool, cuda) -> tuple[types.ModuleType, types.ModuleType]:
    """The `np` and `math` modules generated code sees."""
    fnp = types.ModuleType("xlaplug_cuda_np")
    fmath = types.ModuleType("xlaplug_cuda_math")
    for name in _NP_TYPES + _NP_CONSTS + ("bool",):
        if hasattr(np, name):  # (np.bool: numpy >= 2)
            setattr(fnp, name, getattr(np, name))
    for name in dir(math):
        if not name.startswith("_"):
            setattr(fmath, name, getattr(math, name))
    lines = []
    for name in _NP_UNARY:
        impl = f"np.{name}(np.float64(x))" if sim else f"libdevice.{name}(np.float64(x))"
        lines.append(f"def _np_{name}(x):\n    return {impl}\n")
    for name, ld in _NP_BINARY.items():
        impl = (f"np.{name}(np.float64(a), np.float64(b))" if sim
                else f"libdevice.{ld}(np.float64(a), np.float64(b))")
        lines.append(f"def _np_{name}(a, b):\n    return {impl}\n")
    for name, ld in _MATH_F64.items():
        args = "a, b" if name == "atan2" else "a"
        conv = ", ".join(f"np.float64({v})" for v in args.split(", "))
        impl = f"math.{name}({conv})" if sim else f"libdevice.{ld}({conv})"
        lines.append(f"def _math_{name}({args}):\n    return {impl}\n")
    ns: dict = {"np": np, "math": math}
    if not sim:
        from numba.cuda import libdevice
        ns["libdevice"] = libdevice
    _exec("\n".join(lines), ns, "numpy stand-ins")
    wrap = (lambda f: f) if sim else cuda.jit(device=True)
    for name in _NP_UNARY + tuple(_NP_BINARY):
        setattr(fnp, name, wrap(ns[f"_np_{name}"]))
    for name in _MATH_F64:
        setattr(fmath, name, wrap(ns[f"_math_{name}"]))
    return fnp, fmath


# Helpers with their own device versions (device_helpers.py): bit views, libm primitives,
# and f32 atan2 (libm's atan2f on the CPU: libdevice's on a GPU, libm's through ctypes under
# the simulator, where Python's math has only the f64 atan2).
_DEVICE_VERSIONS = _BIT_HELPERS + _SC.LIBM_HELPERS + ("_xatan2f",)


def _libm_atan2f():
    import ctypes
    import ctypes.util
    fn = ctypes.CDLL(ctypes.util.find_library("m")).atan2f
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float, ctypes.c_float]
    return fn


def _helper_sources() -> list[tuple[str, str]]:
    """(name, source) of every `_x` / `_y` helper of the common scalar modules, decorators
    removed (the bit views and libm primitives excepted: they get device versions).  A
    helper that is another's second name (`_xftzr32 = _xftz32`) is left to `_helper_aliases`."""
    out = []
    for mod in SCALAR_HELPER_MODULES:
        for name, fn in vars(mod).items():
            if not (name.startswith(("_x", "_y")) and inspect.isfunction(fn)):
                continue
            if fn.__module__ != mod.__name__ or name in _DEVICE_VERSIONS:
                continue
            if fn.__name__ != name:
                continue
            src = textwrap.dedent(inspect.getsource(fn))
            src = "\n".join(ln for ln in src.splitlines() if not ln.startswith("@"))
            out.append((name, src + "\n"))
    return out


def _helper_aliases() -> dict[str, str]:
    """{second name: the helper's own name} of the helpers bound under two names."""
    return {name: fn.__name__ for mod in SCALAR_HELPER_MODULES for name, fn in vars(mod).items()
            if name.startswith(("_x", "_y")) and inspect.isfunction(fn)
            and fn.__module__ == mod.__name__ and fn.__name__ != name}


def _helper_constants() -> dict:
    """Module-level numbers (and tuples of them) the helpers read (_TINY32, ...)."""
    consts = {}
    for mod in SCALAR_HELPER_MODULES:
        for name, v in vars(mod).items():
            number = isinstance(v, (int, float, np.generic)) and not isinstance(v, bool)
            coeffs = isinstance(v, tuple) and v and all(isinstance(e, float) for e in v)
            table = isinstance(v, np.ndarray) and v.dtype.kind in "fiu"  # (lookup tables)
            if name.startswith("_") and (number or coeffs or table):  # (coeffs: _TANH_P32)
                consts[name] = v
    return consts


def cuda_namespace() -> dict:
    """Globals for generated CUDA code: `np`, `math` and the `_x`/`_y` helpers as
    device functions (see the module docstring).  Built once (launch.py's table of
    compiled code); do not modify."""
    return cached_kernel("scalar_namespace", _build_namespace)


def _build_namespace() -> dict:
    cuda = cuda_module()
    sim = simulating()
    fnp, fmath = _stand_in_modules(sim, cuda)
    ns: dict = {"np": fnp, "math": fmath}
    ns.update(_helper_constants())
    bits_ns: dict = {"np": np, "math": math}
    if not sim:
        from numba.cuda import libdevice
        bits_ns["libdevice"] = libdevice
    _exec(SIM_BITS if sim else GPU_BITS, bits_ns, "bit views")
    _exec(SIM_LIBM if sim else GPU_LIBM, bits_ns, "libm primitives")
    if sim:  # libm's atan2f, as XLA:CPU and numba on the CPU call it
        bits_ns["_LIBM_ATAN2F"] = _libm_atan2f()
    names = list(_DEVICE_VERSIONS)
    for name in names:
        ns[name] = bits_ns[name]
    for name, src in _helper_sources():
        _exec(src, ns, name)
        names.append(name)
    for name in names:
        ns[name] = cuda.jit(device=True)(ns[name])
    for alias, name in _helper_aliases().items():
        ns[alias] = ns[name]
    return ns


def _quiet(fn):
    """Under the simulator: numpy scalars warn on integer wrap-around and NaN arithmetic,
    which a GPU does silently."""
    def quiet(*args):
        with np.errstate(all="ignore"):
            return fn(*args)
    quiet.__name__ = quiet.__qualname__ = fn.__name__
    return quiet


def _scalar_bitcast(sig: ScalarSig) -> str:
    """A scalar `bitcast` that changes the element type (XLA's compiled comparators
    reinterpret f32 as s32 that way): a same-width bitcast-convert.  (One of the same type
    is the identity, which the generator handles before it reads the table.)"""
    return SCALAR_OPS["bitcast-convert"](sig)


# The scalar op table on CUDA: the common one, extended by dict merge.
CUDA_SCALAR_OPS = {**SCALAR_OPS, "bitcast": _scalar_bitcast}


def generate_source(comp: Computation, fma: bool = True,
                    elementwise: bool = False) -> tuple[str, list, str]:
    """(module source, constants, entry function name), as scalar_jit.generate_source."""
    return scalar_codegen.generate_source(comp, fma, elementwise, CUDA_SCALAR_OPS)


def compile_scalar_device_function(comp: Computation, fma: bool = True,
                                   elementwise: bool = False):
    """A numba.cuda device function evaluating `comp` on scalars (see the module docstring);
    `elementwise`: on one element of each array parameter (a loop fusion's body).

    Raises ScalarCompileError (a ValueError naming the instruction) when the computation has
    an instruction SCALAR_OPS cannot express."""
    src, consts, entry = generate_source(comp, fma, elementwise)
    key = src + "\n#" + "|".join(f"{type(c).__name__}:{c.tobytes().hex()}" for c in consts)
    # One device function per generated source and constants, in launch.py's table: the
    # same computation in another module or context compiles once.
    return cached_kernel(("scalar_function", key),
                         lambda: _compile(comp, src, consts, entry, key))


def _compile(comp: Computation, src: str, consts: list, entry: str, key: str):
    cuda = cuda_module()
    ns = dict(cuda_namespace())
    for i, c in enumerate(consts):
        ns[f"_K{i}"] = c
    # (the key's hash tells apart the linecache entries of computations of one name)
    _exec(src, ns, f"scalar computation {comp.name} {hash(key) & 0xFFFFFFFF:08x}")
    py_funcs = {}
    for name in list(ns):
        if name.startswith("_c") and name[2:].isdigit() and inspect.isfunction(ns[name]):
            py_funcs[name] = fn = ns[name]
            if simulating() and name == entry:
                fn = _quiet(fn)
            ns[name] = cuda.jit(device=True)(fn)
    disp = ns[entry]
    attrs = {"param_types": tuple(p.shape.element_type for p in comp.parameters),
             "result_types": result_types(comp), "source": src}
    if not hasattr(disp, "py_func"):  # (a CUDADispatcher has its own)
        attrs["py_func"] = py_funcs[entry]
    for attr, value in attrs.items():
        setattr(disp, attr, value)
    return disp
