"""Which devices a collective joins, as XLA decides (xla/service/collective_ops_utils.cc:
GetCollectiveOpGroupMode, GetParticipatingDevicesGroups).

A module runs on R replicas x P partitions; device id = replica * P + partition (the default
device assignment).  The group mode follows from `channel_id` and `use_global_device_ids`:

  no channel_id                          cross-replica: groups list replica ids, one set of
                                         groups per partition
  channel_id, op without the ids field   cross-partition: groups list partition ids, one set
  (all-to-all, collective-permute,       per replica
  collective-broadcast)
  channel_id, use_global_device_ids=false  cross-replica-and-partition: groups list replica
  (the field's default on all-reduce,    ids; every partition of each listed replica joins,
  all-gather, reduce-scatter)            replica-major (XLA's order, not the StableHLO spec's)
  channel_id, use_global_device_ids=true   flattened ids: groups list device ids

`replica_groups={}` means one group of all replicas (all partitions in cross-partition mode);
flattened ids need explicit groups.  A participant's rank is its position in its group.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from ...hlo.errors import plural
from ...hlo.ir import Instruction
from ..common.errors import ExecutionError

# Opcodes whose instruction carries use_global_device_ids (HloAllReduceInstructionBase and
# HloAllGatherInstruction in XLA); the others read a channel_id as cross-partition.
GLOBAL_IDS_OPCODES = frozenset({"all-reduce", "all-reduce-start", "reduce-scatter",
                                "all-gather", "all-gather-start"})


class GroupMode(enum.Enum):
    CROSS_REPLICA = "cross-replica"
    CROSS_PARTITION = "cross-partition"
    CROSS_REPLICA_AND_PARTITION = "cross-replica-and-partition"
    FLATTENED_ID = "flattened-id"


@dataclass(frozen=True)
class DeviceGrid:
    """R replicas x P partitions; device d is replica d // P, partition d % P."""
    replicas: int = 1
    partitions: int = 1

    @property
    def count(self) -> int:
        return self.replicas * self.partitions

    def device(self, replica: int, partition: int) -> int:
        return replica * self.partitions + partition

    def replica_of(self, device: int) -> int:
        return device // self.partitions

    def partition_of(self, device: int) -> int:
        return device % self.partitions

    @classmethod
    def of_module(cls, module) -> "DeviceGrid":
        """The counts in the module's header (`replica_count=`, `num_partitions=`), else 1."""
        return cls(int(module.attrs.get("replica_count", 1) or 1),
                   int(module.attrs.get("num_partitions", 1) or 1))


def group_mode(ins: Instruction) -> GroupMode:
    has_channel = ins.attrs.get("channel_id") is not None
    if ins.opcode in GLOBAL_IDS_OPCODES:
        global_ids = bool(ins.attrs.get("use_global_device_ids", False))
        if not has_channel:
            if global_ids:
                raise ExecutionError(f"{ins.opcode} '{ins.name}': use_global_device_ids=true "
                                     "needs a channel_id")
            return GroupMode.CROSS_REPLICA
        return GroupMode.FLATTENED_ID if global_ids else GroupMode.CROSS_REPLICA_AND_PARTITION
    return GroupMode.CROSS_PARTITION if has_channel else GroupMode.CROSS_REPLICA


def listed_groups(ins: Instruction) -> list[tuple[int, ...]]:
    rg = ins.attrs.get("replica_groups")
    return [] if rg is None else [tuple(g) for g in rg.expanded()]


def device_groups(ins: Instruction, grid: DeviceGrid) -> list[tuple[int, ...]]:
    """Every group of devices `ins` forms on `grid`, each in rank order."""
    mode = group_mode(ins)
    groups = listed_groups(ins)
    if not groups:
        if mode is GroupMode.FLATTENED_ID:
            raise ExecutionError(f"{ins.opcode} '{ins.name}': replica groups cannot be empty "
                                 "with use_global_device_ids=true")
        n = grid.partitions if mode is GroupMode.CROSS_PARTITION else grid.replicas
        groups = [tuple(range(n))]
    limit = {GroupMode.CROSS_REPLICA: grid.replicas, GroupMode.CROSS_PARTITION: grid.partitions,
             GroupMode.CROSS_REPLICA_AND_PARTITION: grid.replicas,
             GroupMode.FLATTENED_ID: grid.count}[mode]
    for g in groups:
        for i in g:
            if not 0 <= i < limit:
                what = "partition" if mode is GroupMode.CROSS_PARTITION else (
                    "device" if mode is GroupMode.FLATTENED_ID else "replica")
                raise ExecutionError(f"{ins.opcode} '{ins.name}': {what} {i} in its groups does "
                                     f"not exist ({plural(grid.replicas, 'replica')} x "
                                     f"{plural(grid.partitions, 'partition')}, "
                                     f"{mode.value} mode)")
    out: list[tuple[int, ...]] = []
    if mode is GroupMode.CROSS_REPLICA:
        for g in groups:
            out += [tuple(grid.device(r, p) for r in g) for p in range(grid.partitions)]
    elif mode is GroupMode.CROSS_PARTITION:
        for g in groups:
            out += [tuple(grid.device(r, p) for p in g) for r in range(grid.replicas)]
    elif mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        out = [tuple(grid.device(r, p) for r in g for p in range(grid.partitions))
               for g in groups]
    else:
        out = [tuple(g) for g in groups]
    return out


def participants(ins: Instruction, grid: DeviceGrid, device: int) -> tuple[int, ...]:
    """The devices `device` meets at `ins`, in rank order; a device in no group or in two
    is an error, as XLA's GetParticipatingIDs makes it."""
    mine = [g for g in device_groups(ins, grid) if device in g]
    if len(mine) != 1 or mine[0].count(device) != 1:
        how = "is in no replica group" if not mine else "appears twice in the replica groups"
        raise ExecutionError(f"{ins.opcode} '{ins.name}': device {device} {how} "
                             f"({group_mode(ins).value} mode, groups "
                             f"{[list(g) for g in listed_groups(ins)]})")
    return mine[0]


def permute_domain(ins: Instruction, grid: DeviceGrid, device: int) -> tuple[int, ...]:
    """collective-permute's ids -> devices: replica ids within this device's partition (no
    channel_id), or partition ids within its replica (channel_id)."""
    r, p = grid.replica_of(device), grid.partition_of(device)
    if group_mode(ins) is GroupMode.CROSS_PARTITION:
        return tuple(grid.device(r, q) for q in range(grid.partitions))
    return tuple(grid.device(q, p) for q in range(grid.replicas))
