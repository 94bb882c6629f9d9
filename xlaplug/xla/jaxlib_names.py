"""The one place that touches jax's and jaxlib's private names, and what is made of them
alone: the bridge's errors, and the HLO text <-> StableHLO / MLIR converters.

XLA's own HLO text parser, the HLO <-> StableHLO converters and the XLA:CPU client are not
public jax API; they are reached here and nowhere else (xla_executables.py, which compiles
and runs modules with the client, gets its names from the accessors below), so a jaxlib
upgrade that moves one breaks this file only.  `PRIVATE_NAMES` lists every one of them and `missing_names()` says
which moved (tests/test_xla_bridge.py asserts none did).

Everything imports jaxlib lazily, and jax only where a process has imported it already or a
path needs it (xlaplug.jax, jax_op, check-plugins --engine xla, other platforms, MLIR text
printing): XLA:CPU itself -- its client, HLO -> StableHLO, compiling, arrays and FFI targets
-- is jaxlib's (xla/cpu_client.py, xla/host_arrays.py), so `run --engine xla` /
`--reference xla`, MPI ranks and worker processes do not pay jax's import.  Without jax
installed (or with a jax whose names moved) the caller gets one `error: ... needs jax: pip
install 'xlaplug[xla]'` line (`require_jax`).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import sys

from ..hlo.errors import HloError, one_line

# (module, attribute path) of every private name used below.
PRIVATE_NAMES = (
    ("jaxlib._hlo", "hlo_module_from_text"),                # XLA's HLO text parser
    ("jaxlib._hlo", "HloModule.as_serialized_hlo_module_proto"),
    ("jaxlib._jax", "mlir.hlo_to_stablehlo"),               # HLO proto -> StableHLO bytecode
    ("jaxlib._jax", "mlir.mlir_module_to_xla_computation"),  # StableHLO/MHLO -> HLO
    ("jaxlib._hlo", "XlaComputation.as_hlo_text"),
    ("jax._src.xla_bridge", "get_backend"),                 # jax's clients, where jax runs
    ("jaxlib.xla_client", "make_cpu_client"),               # XLA:CPU's, where it does not
    ("jaxlib.xla_client", "register_custom_call_target"),   # FFI targets
    ("jaxlib.xla_client", "register_custom_call_as_batch_partitionable"),
    ("jaxlib.lapack", "registrations"),                     # jaxlib's LAPACK targets
    ("jaxlib.lapack", "batch_partitionable_targets"),
    ("jaxlib.cpu_feature_guard", "check_cpu_features"),
    ("jaxlib.xla_client", "CompileOptions"),
    ("jaxlib.xla_client", "DeviceAssignment.create"),
    ("jaxlib.xla_client", "DeviceList"),
    ("jaxlib.xla_client", "HloSharding.from_proto"),        # an executable's shardings
    ("jaxlib.xla_client", "HloSharding.replicate"),
    # arrays without jax (xla/host_arrays.py)
    ("jaxlib._jax", "batched_device_put"),
    ("jaxlib._jax", "ArrayImpl"),
    ("jaxlib._jax", "SingleDeviceSharding"),
    ("jaxlib._jax", "GSPMDSharding"),
    ("jaxlib._jax", "array_result_handler"),
    ("jaxlib._jax", "ExecuteResults.consume_with_handlers"),
    ("jaxlib._jax", "reorder_shards"),
    ("jaxlib._jax", "ArrayCopySemantics.REUSE_INPUT"),
    ("jaxlib._jax", "buffer_to_dlpack_managed_tensor"),
    ("jaxlib._jax", "ExecuteResults.__len__"),
    ("jaxlib._jax", "ArrayImpl.block_until_ready"),
    ("jaxlib._jax", "SingleDeviceSharding._memory_kind"),
    ("jaxlib._jax", "GSPMDSharding._hlo_sharding"),
    ("jaxlib.xla_client", "OpSharding.Type.UNREDUCED"),   # global_shards.numpy_indices
    ("jaxlib.xla_client", "HloSharding.subgroup_types"),
    ("jax._src.op_shardings", "op_sharding_to_numpy_indices"),
    ("jax._src.sharding_impls", "GSPMDSharding"),
    ("jax._src.interpreters.mlir", "make_ir_context"),      # MLIR bytecode -> text
    ("jax._src.lib.mlir.ir", "Module.parse"),
)

EXTRA = "pip install 'xlaplug[xla]'"
BYTECODE_MAGIC = b"ML\xefR"


class XlaError(HloError):
    """XLA (through jaxlib) refused a module: its own message, on one line."""

    def headline(self) -> str:
        if self.line or self.file:
            return super().headline()
        return f"error: {one_line(self.message)}"

    def __str__(self) -> str:
        return self.headline() if not (self.line and self.source_line) else super().__str__()


class NeedsJax(HloError):
    """The bridge was asked for but jax (or one of its private names) is not there."""

    def headline(self) -> str:
        return f"error: {one_line(self.message)}"

    def __str__(self) -> str:
        return self.headline()


def _quiet_jaxlib() -> None:
    """What jax's __init__ does before it loads jaxlib: XLA's INFO lines off (jaxlib reads
    TF_CPP_MIN_LOG_LEVEL once, when it loads; a CPU client's start prints two otherwise)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _resolve(module: str, path: str):
    """`module.path` by attribute from the longest prefix that imports (jax._src.lib's
    `_jax` and `xla_client` are attributes, not submodules)."""
    _quiet_jaxlib()
    parts = f"{module}.{path}".split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(module)


def missing_names() -> list[str]:
    """`module.attribute` of each private name this jax does not have."""
    missing = []
    for module, path in PRIVATE_NAMES:
        try:
            _resolve(module, path)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{path}")
    return missing


def require_jax(what: str) -> None:
    """Raise NeedsJax (`error: WHAT needs jax: pip install 'xlaplug[xla]'`) unless jax is
    installed and jaxlib imports -- without importing jax (about 1 s of CPU) where it is
    not imported yet: XLA:CPU's paths need jaxlib only (xla/cpu_client.py)."""
    _quiet_jaxlib()
    try:
        import jaxlib  # noqa: F401
        if sys.modules.get("jax", 0) is None or not _jax_installed():  # (None: blocked)
            raise ImportError("jax")
    except (ImportError, ValueError):
        raise NeedsJax(f"{what} needs jax: {EXTRA}") from None


@functools.cache  # a fact of the process's environment; looking costs ~0.1 ms a call
def _jax_installed() -> bool:
    return "jax" in sys.modules or importlib.util.find_spec("jax") is not None


def _name(module: str, path: str, what: str):
    require_jax(what)
    try:
        return _resolve(module, path)
    except (ImportError, AttributeError):
        import jax
        raise NeedsJax(f"{what} needs jaxlib's {module}.{path}, which jax {jax.__version__} "
                       f"does not have: {EXTRA} (a jax this xlaplug was built with)") from None


def xla_message(e: BaseException) -> str:
    """XLA's message without the status prefix jaxlib adds, as one line."""
    text = str(e).strip() or type(e).__name__
    text = re.sub(r"^(UNKNOWN|INVALID_ARGUMENT|INTERNAL|UNIMPLEMENTED|FAILED_PRECONDITION|"
                  r"NOT_FOUND|UNAVAILABLE): ", "", text)
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


# ---- the XLA client's names, for xla_executables.py ---------------------------------------

def get_backend(what: str):
    """jax's `get_backend(platform)`: the XLA client of a platform."""
    return _name("jax._src.xla_bridge", "get_backend", what)


def xla_client(what: str):
    """jaxlib's xla_client module (CompileOptions, DeviceAssignment, DeviceList,
    HloSharding, FFI registration) -- jax's `jax._src.lib.xla_client` is this module."""
    return _name("jaxlib", "xla_client", what)


def jaxlib_jax(what: str):
    """jaxlib's `_jax` extension (arrays, shardings, executables: xla/host_arrays.py)."""
    return _name("jaxlib", "_jax", what)


def jaxlib_module(name: str, what: str):
    """One of jaxlib's modules (`lapack`, `cpu_feature_guard`: xla/cpu_client.py)."""
    return _name("jaxlib", name, what)


def include_dir(what: str) -> str:
    """jaxlib's bundled headers (xla/ffi/api/c_api.h), as jax.ffi.include_dir() finds them."""
    _name("jaxlib", "xla_client", what)
    jaxlib = sys.modules["jaxlib"]
    return os.path.join(os.path.dirname(os.path.abspath(jaxlib.__file__)), "include")


def sharding_indices(what: str):
    """jax's op_sharding_to_numpy_indices: each device's slice of a sharded array."""
    return _name("jax._src.op_shardings", "op_sharding_to_numpy_indices", what)


def gspmd_sharding(what: str):
    """jax's GSPMDSharding: a jax sharding made from XLA's HloSharding."""
    return _name("jax._src.sharding_impls", "GSPMDSharding", what)


# ---- HLO text <-> StableHLO ------------------------------------------------------------------

def hlo_proto(text: str, what: str) -> bytes:
    """HLO text through XLA's own parser, as a serialized HloModuleProto."""
    parse = _name("jaxlib._hlo", "hlo_module_from_text", what)
    try:
        return parse(text).as_serialized_hlo_module_proto()
    except Exception as e:  # jaxlib raises its own runtime error types
        raise XlaError(f"XLA's HLO parser refuses the module: {xla_message(e)}") from None


def hlo_to_stablehlo_bytecode(text: str, what: str) -> bytes:
    convert = _name("jaxlib._jax", "mlir.hlo_to_stablehlo", what)
    proto = hlo_proto(text, what)
    try:
        return convert(proto)
    except Exception as e:
        raise XlaError(f"XLA cannot convert the module to StableHLO: {xla_message(e)}") from None


def bytecode_to_text(data: bytes, what: str) -> str:
    """MLIR bytecode (or text) printed as MLIR text."""
    context = _name("jax._src.interpreters.mlir", "make_ir_context", what)
    ir = _name("jax._src.lib.mlir", "ir", what)
    with context():
        return str(ir.Module.parse(data))


_LOCATION = re.compile(r"(?:^|\s)(?:-|<stdin>|[^\s:]*):(\d+):(\d+): error: (.*)")


def mlir_to_hlo_text(data: str | bytes, what: str) -> str:
    """StableHLO or MHLO (text or bytecode) as HLO text, through jaxlib's converter.  A parse
    error becomes an XlaError at the line and column jaxlib gives, when it gives one."""
    convert = _name("jaxlib._jax", "mlir.mlir_module_to_xla_computation", what)
    try:
        computation = convert(data, use_tuple_args=False, return_tuple=False)
    except Exception as e:
        text = str(e)
        m = _LOCATION.search(text)
        if m:
            raise XlaError(m.group(3).strip(), line=int(m.group(1)),
                           column=int(m.group(2))) from None
        raise XlaError(f"cannot convert MLIR to HLO: {xla_message(e)}") from None
    # Every constant's values (XLA's printer elides large ones as {...} by default).
    return computation.as_hlo_text(print_large_constants=True)
