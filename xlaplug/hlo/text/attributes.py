"""Instruction attributes: the kind of each known name, parsing its value text, printing it.

XLA's own parser knows each attribute's kind by name (hlo_parser.cc's `attrs` tables); so
do we.  A name we do not know is kept as `Raw` text, so nothing is ever lost.

The value parsers live in the attr_* modules, by family (attr_values: the basic kinds,
attr_windows, attr_collectives, attr_sharding, attr_config, attr_shapes; attr_text and
attr_cursor: the shared text helpers); this module holds the table from attribute name to
parser, `parse_attr`, the printing side, and re-exports the names other code imports.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Callable

from .attr_collectives import (expand_iota_groups, p_buffer_donor, p_io_alias,  # noqa: F401
                               p_output_operand_aliasing, p_pairs, p_replica_groups)
from .attr_config import (p_backend_config, p_braced_raw, p_debug_attributes,  # noqa: F401
                          p_metadata, p_raw,
                          p_result_accuracy, p_str_dict)
from .attr_sharding import p_sharding
from .attr_shapes import p_computation_layout, p_literal, p_shape, p_shapes
from .attr_text import AttrError, quote, split_top, split_top_at, unquote  # noqa: F401
from ..attr_types import (BufferDonor, ComputationLayout, ConvDims, InputOutputAlias,  # noqa: F401
                         LiteralTuple, LiteralValue, OutputOperandAliasing, PadDim, Padding, Raw,
                         ReplicaGroups, ResultAccuracy, Sharding, SliceDim, SliceRanges, Window,
                         WindowDim, Word)
from .attr_values import (ENUMS, CompRef, InstrRef, _enum_parser, p_bool,  # noqa: F401
                          p_bool_list, p_bool_or_list, p_comp, p_comps, p_float, p_instrs, p_int,
                          p_int_list, p_int_list_or_lists, p_precision_list, p_string, p_word,
                          p_word_list)
from .attr_windows import p_conv_dims, p_padding, p_slice, p_window


# ---- the table ---------------------------------------------------------------------------

INT_LISTS = (
    "dimensions", "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
    "rhs_contracting_dims", "offset_dims", "collapsed_slice_dims", "start_index_map",
    "operand_batching_dims", "start_indices_batching_dims", "update_window_dims",
    "inserted_window_dims", "scatter_dims_to_operand_dims", "input_batching_dims",
    "scatter_indices_batching_dims", "fft_length", "dynamic_slice_sizes", "lhs_ragged_dims",
    "rhs_group_dims",
)
INTS = ("index", "index_vector_dim", "iota_dimension", "channel_id", "feature_group_count",
        "batch_group_count", "exponent_bits", "mantissa_bits", "k", "feature_index",
        "cross_program_prefetch_index", "split_dimension", "all_gather_dimension", "delta",
        "num_carries", "inferred_dimension", "replica_count", "num_partitions")
BOOLS = ("is_stable", "indices_are_sorted", "unique_indices", "constrain_layout",
         "use_global_device_ids", "custom_call_has_side_effect", "is_composite", "left_side",
         "lower", "unit_diagonal", "largest", "is_host_transfer", "is_cross_program_prefetch",
         "is_reverse", "is_associative", "is_scheduled", "alias_passthrough_params",
         "has_dynamic_root")
WORDS = ("algorithm", "mode")
STRINGS = ("custom_call_target", "infeed_config", "outfeed_config", "async_execution_thread",
           "execution_thread", "op_name")
COMPS = ("to_apply", "condition", "body", "true_computation", "false_computation", "select",
         "scatter")
COMP_LISTS = ("calls", "branch_computations", "called_computations")

PARSERS: dict[str, Callable[[str], Any]] = {
    **{k: p_int_list for k in INT_LISTS}, **{k: p_int for k in INTS},
    **{k: p_bool for k in BOOLS}, **{k: p_word for k in WORDS}, **{k: p_string for k in STRINGS},
    **{k: p_comp for k in COMPS}, **{k: p_comps for k in COMP_LISTS},
    **{k: _enum_parser(k) for k in ENUMS},
    "slice": p_slice, "window": p_window, "dim_labels": p_conv_dims, "padding": p_padding,
    "metadata": p_metadata, "frontend_attributes": p_str_dict,
    "replica_groups": p_replica_groups, "source_target_pairs": p_pairs,
    "slice_sizes": p_int_list_or_lists, "sharding": p_sharding,
    "backend_config": p_backend_config, "operand_layout_constraints": p_shapes,
    "control-predecessors": p_instrs, "operand_precision": p_precision_list,
    "parameter_replication": p_bool_list, "epsilon": p_float, "outfeed_shape": p_shape,
    "output_to_operand_aliasing": p_output_operand_aliasing,
    "result_accuracy": p_result_accuracy, "literal": p_literal,
    "statistics": p_braced_raw, "origin": p_braced_raw, "domain": p_braced_raw,
    # Module header.
    "entry_computation_layout": p_computation_layout, "input_output_alias": p_io_alias,
    "buffer_donor": p_buffer_donor, "debug_attributes": p_debug_attributes,
    "allow_spmd_sharding_propagation_to_parameters": p_bool_or_list,
    "allow_spmd_sharding_propagation_to_output": p_bool_or_list,
}


# Kinds whose values are immutable, so one parse can serve every repetition of the same
# text (`dimensions={0}`, `index=1`, `direction=LT` repeat thousands of times in big modules).
_CACHEABLE = frozenset(INT_LISTS + INTS + BOOLS + WORDS + tuple(ENUMS) + (
    "slice", "window", "dim_labels", "padding", "operand_precision", "replica_groups",
    "source_target_pairs", "parameter_replication", "slice_sizes", "sharding",
    "output_to_operand_aliasing", "result_accuracy"))


@lru_cache(maxsize=8192)
def _parse_cached(name: str, text: str) -> Any:
    return PARSERS[name](text)


def parse_attr(name: str, text: str) -> Any:
    if name in _CACHEABLE:
        return _parse_cached(name, text)
    parser = PARSERS.get(name)
    if parser is None:
        return Raw(text)
    return parser(text)


# ---- printing ----------------------------------------------------------------------------

# Names that XLA's lexer would read as something else unless written with a `%` sigil.
_RESERVED = frozenset({"ROOT", "ENTRY", "HloModule", "true", "false", "inf", "nan",
                       "maximal", "replicated", "manual", "unknown", "unreduced",
                       "last_tile_dim_replicate", "shard_as", "shard_like", "FileNames",
                       "FunctionNames", "FileLocations", "StackFrames", "token", "opaque",
                       "tuple", "buffer"})
_NEEDS_SIGIL = re.compile(r"(?:pred|[suf]\d+|bf16|c64|c128|f8e\w+|f4e\w+)$")


def name_ref(name: str) -> str:
    """A computation or instruction name as printed: bare, like JAX prints it, unless
    the bare name would lex as a keyword or an element type."""
    if name in _RESERVED or _NEEDS_SIGIL.match(name):
        return "%" + name
    return name


_STR_TYPES = (Window, SliceRanges, ConvDims, Padding, ReplicaGroups, Sharding, ComputationLayout,
              InputOutputAlias, BufferDonor, OutputOperandAliasing, ResultAccuracy)


# Names whose list or tuple values print their own way (format_value's last branches).
_TUPLE_SPECIAL = frozenset(COMP_LISTS) | {"control-predecessors", "source_target_pairs",
                                          "operand_layout_constraints"}


def format_value(name: str, v: Any) -> str:
    t = type(v)
    if t is int:  # the common kinds first (exact types: bool, Word are subclasses)
        return str(v)
    if t is str:
        return quote(v)
    if t is tuple and name not in _TUPLE_SPECIAL:
        return "{" + ",".join([str(x) if type(x) is int else format_value(name, x)
                               for x in v]) + "}"
    from ..ir import Computation, Instruction, Shape
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (Raw, Word)):
        return str(v)
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, Computation):
        return name_ref(v.name)
    if isinstance(v, _STR_TYPES):
        return str(v)
    if isinstance(v, LiteralValue):
        from .literal_format import format_literal
        return f"{v.shape} {format_literal(v.value, v.shape)}"
    if isinstance(v, LiteralTuple):
        return "( " + ", ".join(format_value(name, x) for x in v.items) + " )"
    if isinstance(v, dict):
        if name == "metadata":
            return "{" + " ".join(f"{k}={format_value(k, x)}" for k, x in v.items()) + "}"
        return "{" + ",".join(f"{k}={format_value(k, x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        if name in COMP_LISTS:
            if name == "calls" and len(v) == 1:
                return name_ref(v[0].name)
            return "{" + ", ".join(name_ref(c.name) for c in v) + "}"
        if name == "control-predecessors":
            return "{" + ", ".join(name_ref(i.name) for i in v) + "}"
        if name == "source_target_pairs":
            return "{" + ",".join("{" + f"{a},{b}" + "}" for a, b in v) + "}"
        if name == "operand_layout_constraints":
            return "{" + ", ".join(str(s) for s in v) + "}"
        return "{" + ",".join(format_value(name, x) for x in v) + "}"
    if isinstance(v, Shape):
        return str(v)
    if isinstance(v, Instruction):
        return name_ref(v.name)
    raise TypeError(f"cannot print attribute {name}={v!r}")
