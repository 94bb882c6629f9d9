"""Horovod's collectives as custom calls, over every device of the run (replicas and
partitions): each has a canonical lowering into core HLO collectives -- portable: real XLA
runs it the same in a replicas-only and in a partitions-only module -- and a CPU kernel that
calls the run's communicator directly (one MPI call under mpiexec for native sums).

    %r = f32[1024] custom-call(%grad), custom_call_target="HorovodAllreduce",
         backend_config={reduce_op = "average"}

  HorovodAllreduce      reduce_op sum | average | min | max | product (average: sum / D)
  HorovodAllgather      every device's operand, concatenated on axis 0
  HorovodBroadcast      root_rank's operand (default 0)
  HorovodAlltoall       block i of axis 0 to device i, received blocks concatenated
  HorovodReducescatter  reduce_op sum | average | min | max | product, part d to device d

The decompositions use flattened device ids (channel_id with use_global_device_ids=true and
one group of all D = replica_count x num_partitions devices), the one group mode that means
"every device" in both kinds of module.
"""
from xlaplug.hlo.attr_types import ReplicaGroups, SliceDim, SliceRanges
from xlaplug.hlo.ir import Shape
from xlaplug.plugin import Plugin

plugin = Plugin("horovod", version="2.0",
                description="Horovod collectives over all devices -> core collectives")

_REDUCERS = {"sum": "add", "average": "add", "max": "maximum", "min": "minimum",
             "product": "multiply", "prod": "multiply"}
_EX = [(("f32[16]",), {"reduce_op": "sum"}), (("f32[4,3]",), {"reduce_op": "average"}),
       (("s32[8]",), {"reduce_op": "max"})]


def _op(reduce_op: str) -> str:
    if reduce_op not in _REDUCERS:
        raise ValueError(f"reduce_op must be one of {', '.join(sorted(_REDUCERS))}, got "
                         f"{reduce_op!r}")
    return reduce_op


def _all_devices(b) -> dict:
    """Attributes of a collective over every device of the module, in device order."""
    return {"channel_id": b.channel_id(), "use_global_device_ids": True,
            "replica_groups": ReplicaGroups(groups=(tuple(range(b.num_devices)),))}


def _leading(x: Shape, factor: int, what: str) -> Shape:
    dims = list(x.dims)
    if not dims:
        raise ValueError(f"{what} needs an operand with at least one dimension, got {x}")
    dims[0] = dims[0] * factor
    return Shape.array(x.element_type, dims)


# ---- allreduce ----------------------------------------------------------------------------

@plugin.shape("HorovodAllreduce", examples=_EX)
def allreduce_shape(x, *, reduce_op="sum"):
    _op(reduce_op)
    return x


@plugin.decomposition("HorovodAllreduce")
def allreduce_decomposed(b, x, *, reduce_op="sum"):
    op = _REDUCERS[_op(reduce_op)]
    reducer = b.scalar_computation(f"horovod_{op}", op, x.shape.element_type)
    r = b.op("all-reduce", x, to_apply=reducer, **_all_devices(b))
    if reduce_op == "average":
        n = b.constant(b.num_devices, x.shape.dtype)
        r = b.divide(r, n)
    return r


@plugin.kernel("HorovodAllreduce", communicator=True)
def allreduce_kernel(x, out, *, comm, reduce_op="sum"):
    out[...] = comm.allreduce(x, {"prod": "product"}.get(reduce_op, _op(reduce_op)))


# ---- allgather ----------------------------------------------------------------------------

@plugin.shape("HorovodAllgather", examples=[(("f32[2,3]",), {}), (("s32[4]",), {})])
def allgather_shape(x, *, num_devices=1):
    return _leading(x, num_devices, "HorovodAllgather")


@plugin.decomposition("HorovodAllgather")
def allgather_decomposed(b, x):
    return b.op("all-gather", x, dimensions=(0,), shape=_leading(x.shape, b.num_devices,
                                                                  "HorovodAllgather"),
                **_all_devices(b))


@plugin.kernel("HorovodAllgather", communicator=True)
def allgather_kernel(x, out, *, comm):
    out[...] = comm.allgather(x)


# ---- broadcast ----------------------------------------------------------------------------

@plugin.shape("HorovodBroadcast", examples=[(("f32[5]",), {"root_rank": 0}),
                                            (("s32[2,2]",), {"root_rank": 0})])
def broadcast_shape(x, *, root_rank=0, num_devices=1):
    if not 0 <= int(root_rank) < num_devices:
        raise ValueError(f"root_rank {root_rank} is not a device (0..{num_devices - 1})")
    return x


@plugin.decomposition("HorovodBroadcast")
def broadcast_decomposed(b, x, *, root_rank=0):
    # all-gather then the root's block: exact, and XLA:CPU has no collective-broadcast.
    dims = x.shape.dims
    one = b.reshape(x, (1,) + tuple(dims))
    every = b.op("all-gather", one, dimensions=(0,), **_all_devices(b),
                 shape=Shape.array(x.shape.element_type, (b.num_devices,) + tuple(dims)))
    r = int(root_rank)
    part = b.op("slice", every, slice=SliceRanges((SliceDim(r, r + 1),) +
                                                   tuple(SliceDim(0, d) for d in dims)))
    return b.reshape(part, dims)


@plugin.kernel("HorovodBroadcast", communicator=True)
def broadcast_kernel(x, out, *, comm, root_rank=0):
    out[...] = comm.broadcast(x, int(root_rank))


# ---- alltoall -----------------------------------------------------------------------------

@plugin.shape("HorovodAlltoall", examples=[(("f32[8,3]",), {})])
def alltoall_shape(x, *, num_devices=1):
    if not x.dims or x.dims[0] % num_devices:
        raise ValueError(f"axis 0 of {x} must be a multiple of the device count {num_devices}")
    return x


@plugin.decomposition("HorovodAlltoall")
def alltoall_decomposed(b, x):
    everyone = ReplicaGroups(groups=(tuple(range(b.num_devices)),))
    # all-to-all spans all devices only when they are all replicas (no channel_id) or all
    # partitions (channel_id): it has no flattened-id mode.
    if b.partitions == 1:
        return b.op("all-to-all", x, dimensions=(0,), replica_groups=everyone)
    if b.replicas == 1:
        return b.op("all-to-all", x, dimensions=(0,), channel_id=b.channel_id(),
                    replica_groups=everyone)
    # Both: gather every device's x, then take block `device` of each.
    n, dims = b.num_devices, tuple(x.shape.dims)
    et = x.shape.element_type
    one = b.reshape(x, (1,) + dims)
    every = b.op("all-gather", one, dimensions=(0,), **_all_devices(b),
                 shape=Shape.array(et, (n,) + dims))
    blocks = b.reshape(every, (n, n, dims[0] // n) + dims[1:])
    device = b.add(b.multiply(b.op("replica-id"), b.constant(b.partitions, "u32")),
                   b.op("partition-id"))
    zero = b.constant(0, "u32")
    mine = b.op("dynamic-slice", blocks, zero, device, *[zero] * (len(dims)),
                dynamic_slice_sizes=(n, 1, dims[0] // n) + dims[1:])
    return b.reshape(mine, dims)


@plugin.kernel("HorovodAlltoall", communicator=True)
def alltoall_kernel(x, out, *, comm):
    out[...] = comm.alltoall(x)


# ---- reducescatter ------------------------------------------------------------------------

@plugin.shape("HorovodReducescatter", examples=[(("f32[8,2]",), {"reduce_op": "sum"}),
                                                (("f32[4]",), {"reduce_op": "average"})])
def reducescatter_shape(x, *, reduce_op="sum", num_devices=1):
    _op(reduce_op)
    if not x.dims or x.dims[0] % num_devices:
        raise ValueError(f"axis 0 of {x} must be a multiple of the device count {num_devices}")
    return Shape.array(x.element_type, (x.dims[0] // num_devices,) + tuple(x.dims[1:]))


@plugin.decomposition("HorovodReducescatter")
def reducescatter_decomposed(b, x, *, reduce_op="sum"):
    op = _REDUCERS[_op(reduce_op)]
    reducer = b.scalar_computation(f"horovod_{op}", op, x.shape.element_type)
    dims = (x.shape.dims[0] // b.num_devices,) + tuple(x.shape.dims[1:])
    r = b.op("reduce-scatter", x, to_apply=reducer, dimensions=(0,),
             shape=Shape.array(x.shape.element_type, dims), **_all_devices(b))
    if reduce_op == "average":
        r = b.divide(r, b.constant(b.num_devices, x.shape.dtype))
    return r


@plugin.kernel("HorovodReducescatter", communicator=True)
def reducescatter_kernel(x, out, *, comm, reduce_op="sum"):
    out[...] = comm.reducescatter(x, {"prod": "product"}.get(reduce_op, _op(reduce_op)))
