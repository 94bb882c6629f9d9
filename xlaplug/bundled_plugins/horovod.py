"""Horovod-style all-reduce as a custom call with a canonical lowering into core HLO.

    %r = f32[1024] custom-call(%grad), custom_call_target="HorovodAllreduce",
         backend_config={reduce_op = "sum"}

The decomposition is XLA's own `all-reduce` over all replicas with the matching reducer,
so the program stays portable; a fast transport would add a kernel for "HorovodAllreduce".
"""
from xlaplug.plugin import Plugin

plugin = Plugin("horovod", version="1.0", description="HorovodAllreduce -> core all-reduce")

_REDUCERS = {"sum": "add", "max": "maximum", "min": "minimum", "prod": "multiply"}


@plugin.shape("HorovodAllreduce", examples=[(("f32[16]",), {"reduce_op": "sum"})])
def allreduce_shape(x, *, reduce_op="sum"):
    return x


@plugin.decomposition("HorovodAllreduce")
def allreduce_decomposed(b, x, *, reduce_op="sum"):
    if reduce_op not in _REDUCERS:
        raise ValueError(f"HorovodAllreduce: reduce_op must be one of {sorted(_REDUCERS)}, "
                         f"got {reduce_op!r}")
    from xlaplug.hlo.attr_types import ReplicaGroups
    reducer = b.scalar_computation(f"horovod_{reduce_op}", _REDUCERS[reduce_op],
                                   x.shape.element_type)
    return b.op("all-reduce", x, to_apply=reducer, replica_groups=ReplicaGroups(groups=()))
