"""An all-reduce among device threads of one process, its work divided as XLA:CPU's in-process
communicator divides it (`AllReduceOp` in in_process_communicator.cc): the flattened
operand is cut into one chunk per participant (ceil(count / n) elements each); participant k
reduces chunk k of every participant's input, in rank order, into rank 0's output and copies
it into every other participant's output.  numpy's ufuncs release the GIL, so the chunks are
reduced in parallel; the rendezvous's second meeting (`Rendezvous.share`) keeps every output
unread until all chunks are in.

Each element is reduced exactly as when one device reduces the whole buffer (same order,
same types, bf16 and f8 in f32), so the bits are the same.
"""
from __future__ import annotations

import numpy as np

# Below this many bytes per device, dividing the work costs more than it saves (a second
# meeting of the device threads, whose wake-ups and GIL hand-offs cost more than the adds):
# the last device to arrive reduces the whole buffer once.  Measured on 2 cores, D = 4, f32
# sum: at 64 KiB no gain, at 1 MiB 1.1 ms divided against 4.7 ms whole.  The data-parallel
# MLP step's 640 KiB all-reduce on four device threads blocked 24-29 times a run divided
# against 15-18 times whole (voluntary context switches, one core or two); where a blocking
# wait costs ~0.1 ms (a gVisor host: four threads 8.9 ms, one 6.3), those ~10 waits outweigh
# the ~0.2 ms of adds the division spreads.
SHARE_FROM_BYTES = 1 << 20


def chunk(count: int, n: int, rank: int) -> slice:
    """Chunk `rank` of `count` elements cut in `n`, as XLA's AllReduceOp cuts them."""
    size = -(-count // n)
    return slice(min(size * rank, count), min(size * (rank + 1), count))


def reduce_my_chunk(every: list[tuple[list[np.ndarray], list[np.ndarray]]], rank: int,
                    combine, reduce_values, parts: int | None = None) -> None:
    """`every[j]` = (inputs, outputs) of rank j; reduces chunk `rank` of `parts` (default:
    one per rank) of each leaf into every rank's output.  `reduce_values(values, combine,
    dtype)` is the whole-buffer reduction."""
    n = len(every)
    for leaf in range(len(every[0][0])):
        ins = [e[0][leaf].reshape(-1) for e in every]
        outs = [e[1][leaf].reshape(-1) for e in every]
        part = chunk(ins[0].size, parts or n, rank)
        if part.start >= part.stop:
            continue
        xs = [x[part] for x in ins]
        dest = outs[0][part]
        uf = getattr(combine, "ufunc", None)
        if n == 1:  # a group of one device: its own values
            np.copyto(dest, xs[0])
        elif uf is not None and dest.dtype.kind in "biufc":
            # Into the destination: the same ufunc on the same types as combine(acc, x),
            # with no temporaries and no separate copy of rank 0's chunk.
            uf(xs[0], xs[1], out=dest)
            for x in xs[2:]:
                uf(dest, x, out=dest)
        else:
            dest[...] = reduce_values(xs, combine, dest.dtype)
        for o in outs[1:]:
            o[part] = dest


def contiguous(values: list[np.ndarray]) -> list[np.ndarray]:
    # np.require, not np.ascontiguousarray: that one makes a rank-0 value rank 1
    return [np.require(v, requirements="C") for v in values]

