"""`list-opcodes`: for every core opcode, where each fact about it lives -- its shape rule,
its CPU and CUDA kernels (`file:function`, paths under xlaplug/), its scalar form (the
scalar op table's emitter, which fused loops and compiled reducers use), whether loop
fusion takes it, and which loaded plugins override its kernel.

Everything is read from the registries (shape_rules.RULES, backends.registry, the scalar
tables, backends/common/fusion_contents.py, the plugin registry), never listed here, so
the report cannot drift from what runs.
"""
from __future__ import annotations

import inspect
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # xlaplug/


def where(fn) -> str:
    """`path/under/xlaplug.py:function` of a function (a closure: the function making it)."""
    fn = inspect.unwrap(fn)
    try:
        path = Path(inspect.getsourcefile(fn) or "?").resolve()
        rel = path.relative_to(_PACKAGE).as_posix()
    except (TypeError, ValueError):
        rel = getattr(fn, "__module__", "?")
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", "?")).split(".<locals>")[0]
    return f"{rel}:{name}"


def _kernel_where(op: str, device: str) -> str | None:
    from ..backends.coverage import BY_EXECUTOR
    from ..backends.registry import lookup
    if op in BY_EXECUTOR:
        return f"backends/executor.py:{BY_EXECUTOR[op]}"
    fn = lookup(op, device)
    return None if fn is None else where(fn)


def _loop_fusion(op: str) -> str:
    """Whether passes/loop_fusion.py may put `op` inside a loop fusion."""
    from ..backends.common.fusion_contents import LOOP_OPS, SHAPE_OPS
    if op in LOOP_OPS or op in SHAPE_OPS or op == "broadcast":
        return "yes"
    if op == "constant":
        return "rank 0"  # a rank-0 constant is copied into every fusion that reads it
    return "no"


def opcode_rows(registry=None) -> list[dict]:
    """One dict per core opcode, sorted by name; `registry`: loaded plugins (or None)."""
    from ..backends.common.scalar_ops import SCALAR_OPS
    from ..backends.coverage import NOT_SUPPORTED
    from ..backends.cuda.scalar_cuda import CUDA_SCALAR_OPS
    from ..hlo.opcodes import ALL_OPCODES
    from ..hlo.shape_rules import RULES
    overrides: dict[str, list[str]] = {}
    if registry is not None:
        for (op, device), entry in sorted(registry.kernels.items()):
            if op in ALL_OPCODES:
                overrides.setdefault(op, []).append(f"{entry.plugin.name} ({device})")
    rows = []
    for op in sorted(ALL_OPCODES):
        scalar = SCALAR_OPS.get(op)
        cuda_scalar = CUDA_SCALAR_OPS.get(op)
        rows.append({
            "opcode": op,
            "shape_rule": where(RULES[op]) if op in RULES else None,
            "kernels": {"cpu": _kernel_where(op, "cpu"), "cuda": _kernel_where(op, "cuda")},
            "scalar": where(scalar) if scalar is not None else None,
            "scalar_cuda": (where(cuda_scalar) if cuda_scalar is not None
                            and cuda_scalar is not scalar else None),
            "loop_fusion": _loop_fusion(op),
            "overridden_by": overrides.get(op, []),
            "not_supported": NOT_SUPPORTED.get(op),
        })
    return rows


def opcodes_json(registry=None) -> dict:
    return {"opcodes": opcode_rows(registry)}


# File names abbreviated so that the table fits 80 columns (the legend is its caption).
_ABBREV = {"elementwise_convert": "ew_conv", "elementwise_logic": "ew_logic",
           "elementwise_math": "ew_math", "elementwise_arith": "ew_arith", "elementwise": "ew",
           "data_movement": "data_mv",
           "gather_scatter": "gath_sc", "control_flow": "ctrl_flow",
           "linalg_fft_rng": "lin_f_rng", "compiled_while": "while_jit",
           "reduce_window": "red_win", "collectives": "collect", "structural": "struct",
           "reductions": "reduce", "reduction": "reduce", "conversion": "convert",
           "fused_loop": "fused", "elementwise_expanded": "ew_exp", "convolution": "conv",
           "factorization": "factor"}
_LEGEND = ("ew = elementwise, ew_exp = elementwise_expanded, spmd = backends/spmd/kernels, "
           "mv = movement, gath_sc = gather_scatter, lin_f_rng = "
           "linalg_fft_rng, while_jit = compiled_while, red_win = reduce_window, conv = "
           "convolution, factor = factorization, r0 = rank-0 "
           "constants only; --json gives file:function")


def _short(loc: str | None) -> str:
    """`backends/cpu/elementwise_math.py:_unary` -> `ew_math`: the file, abbreviated."""
    if loc is None:
        return "-"
    path = loc.split(":")[0]
    if "/spmd/" in path:  # the multi-device collectives (backends/spmd/kernels.py, all_reduce.py)
        return "spmd"
    stem = path.rsplit("/", 1)[-1].removesuffix(".py")
    return _ABBREV.get(stem, stem)


def opcodes_table(registry=None):
    """A rich table, abbreviated file names and marks for yes/no, that wraps its cells to
    the width it is printed at (never cuts them)."""
    from .terminal import table
    t = table("core opcodes: where each is implemented (files under xlaplug/)", _LEGEND)
    t.pad_edge = False
    for h in ("opcode", "rule", "cpu", "cuda", "scalar", "fuse", "plugin"):
        t.add_column(h)
    for r in opcode_rows(registry):
        scalar = "yes" if r["scalar"] else ("cuda" if r["scalar_cuda"] else "-")
        fuse = {"yes": "yes", "rank 0": "r0", "no": "-"}[r["loop_fusion"]]
        plugins = ",".join(sorted({o.split(" ")[0] for o in r["overridden_by"]})) or "-"
        cpu, cuda = _short(r["kernels"]["cpu"]), _short(r["kernels"]["cuda"])
        if r["not_supported"]:
            cpu = cuda = "(none)"
        t.add_row(r["opcode"], _short(r["shape_rule"]), cpu, cuda, scalar, fuse, plugins)
    return t
