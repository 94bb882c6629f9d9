"""Replica groups and source-target pairs, read for one replica and one partition
(device id 0): what both devices' collective kernels check before copying."""
from __future__ import annotations

from .errors import ExecutionError

_SELF = 0


def check_groups(ins) -> None:
    """Refuse a replica group of more than one member: this runs on one device."""
    groups = ins.attrs.get("replica_groups")
    if groups is None:
        return
    try:
        expanded = groups.expanded()
    except Exception:  # noqa: BLE001 - malformed iota text: leave it to the shape checks
        return
    for g in expanded:
        if len(g) > 1:
            raise ExecutionError(f"{ins.opcode} '{ins.name}': replica group {list(g)} has "
                                 f"{len(g)} members, but this runs on one device")


def leaf_shapes(shape, n: int):
    """The result shapes of a collective over n operands (a tuple when n > 1)."""
    if n == 1 and not shape.is_tuple:
        return [shape]
    return list(shape.tuple_shapes)


def receives(ins) -> bool:
    """Does device 0 receive in this collective-permute (a {0,0} pair)?  A pair from a
    device that is not present is an error."""
    pairs = ins.attrs.get("source_target_pairs", ())
    for src, dst in pairs:
        if dst == _SELF:
            if src != _SELF:
                raise ExecutionError(f"{ins.opcode} '{ins.name}': device {src} is not "
                                     "present (this runs on one device)")
            return True
    return False
