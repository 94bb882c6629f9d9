"""Plain jax programs under mpiexec calling the Horovod ops through xlaplug.jax.op (their MPI
kernels inside XLA) and xlaplug.jax.jit(engine="xla"); each rank saves what it got.

    mpiexec -n D python tests/jax_mpi_program.py OUT [--quick]

Run by tests/test_jax_mpi.py, which holds the results against jax on one process.  Rank r
writes OUT.r.npz; its inputs are X[r] (and W[r]) of `inputs(D)`.  `--quick`: the values of
one jit only (the -n 4 run).
"""
from __future__ import annotations

import os
import sys
import time

# Ranks outnumbering cores: XLA's idle Eigen workers would spin where the ranks wait (mpi.md)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import xlaplug.jax  # noqa: E402


def inputs(d: int):
    rng = np.random.default_rng(d)
    x = rng.standard_normal((d, 2 * d, 3)).astype(np.float32)
    w = rng.standard_normal((d, 2 * d, 3)).astype(np.float32)
    k = rng.integers(-50, 50, (d, 4)).astype(np.int32)
    return x, w, k


def main(out: str, quick: bool) -> None:
    from mpi4py import MPI
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    x, w, k = (a[rank] for a in inputs(size))
    op = {n: xlaplug.jax.op(n, collective_timeout=20) for n in (
        "HorovodAllreduce", "HorovodAllgather", "HorovodReducescatter", "HorovodAlltoall",
        "HorovodBroadcast")}

    def every(v, i):  # seven independent collectives in one jit: one order on every rank
        return (op["HorovodAllreduce"](v, reduce_op="sum"),
                op["HorovodAllreduce"](v, reduce_op="average"),
                op["HorovodAllreduce"](i, reduce_op="max"),
                op["HorovodAllgather"](v),
                op["HorovodReducescatter"](v, reduce_op="sum"),
                op["HorovodAlltoall"](v),
                op["HorovodBroadcast"](v, root_rank=size - 1))
    got = dict(zip(("sum", "average", "max", "allgather", "reducescatter", "alltoall",
                    "broadcast"), map(np.asarray, jax.jit(every)(x, k))))
    if not quick:
        def control(v):  # calls in a loop body and a branch chain among themselves
            ar = op["HorovodAllreduce"]
            looped = jax.lax.fori_loop(0, 3, lambda _, c: ar(c, reduce_op="average") + 1.0, v)
            return looped, jax.lax.cond(v.sum() > -1e9, lambda u: ar(u, reduce_op="max"),
                                        lambda u: u, v)
        got["loop"], got["branch"] = map(np.asarray, jax.jit(control)(x))
        got["vmap"] = np.asarray(jax.jit(jax.vmap(
            lambda v: op["HorovodAllreduce"](v, reduce_op="sum")))(np.stack([x, 2 * x])))

        def loss(v):  # this rank's share of the loss; the gradient sums every rank's
            ar = op["HorovodAllreduce"](v, reduce_op="sum")
            ag = op["HorovodAllgather"](v * v)
            return (ar * w).sum() + (ag[: v.shape[0]] * 0.5 + ag.sum() * 0.25).sum()
        got["grad"] = np.asarray(jax.jit(jax.grad(loss))(x))
        got["grad_eager"] = np.asarray(jax.grad(lambda v: (op["HorovodReducescatter"](
            v, reduce_op="average") * w[: v.shape[0] // size]).sum())(x))

        def through_xlaplug(v):  # as jax.ffi.ffi_call writes it, and the op: the engine's
            return jax.ffi.ffi_call("HorovodAllreduce", jax.ShapeDtypeStruct(v.shape, v.dtype))(
                v, reduce_op="sum") + op["HorovodAllreduce"](v, reduce_op="sum")
        got["jit_engine"] = np.asarray(xlaplug.jax.jit(through_xlaplug, engine="xla")(x))
        # a peer that never comes: rank 0 ends in one error within the timeout
        late = xlaplug.jax.op("HorovodAllgather", collective_timeout=1)
        t0 = time.monotonic()
        if rank == 0:
            try:
                jax.jit(late)(x).block_until_ready()
                got["timeout_error"] = np.array("no error")
            except Exception as e:  # noqa: BLE001 -- what jax raises is the test's finding
                got["timeout_error"] = np.array(str(e))
            got["timeout_s"] = np.array(time.monotonic() - t0)
        else:
            time.sleep(2)
    np.savez(f"{out}.{rank}.npz", **got)


if __name__ == "__main__":
    main(sys.argv[1], "--quick" in sys.argv[2:])
