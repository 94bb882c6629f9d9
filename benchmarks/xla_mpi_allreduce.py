"""All-reduce through `--engine xla` over MPI against raw mpi4py (and mpi4jax inside
`jax.jit`, where it is installed), measured in the same run.

    python benchmarks/xla_mpi_allreduce.py               # D = 2 and 4; 1 and 16 MiB
    python benchmarks/xla_mpi_allreduce.py --devices 2 --sizes 1048576
    python benchmarks/xla_mpi_allreduce.py --json

Each of D processes (`mpiexec -n D`) runs an HLO module holding one f32 all-reduce (sum
over all replicas), as `mpiexec -n D xlaplug run M --engine xla` runs it: the rank's
program compiled once by XLA:CPU, its all-reduce a typed-FFI call (`xlaplug.mpi.all_reduce`)
served by xlaplug's MPI transport (runtime/mpi_engine.py).  Timed: one execution of that
executable, to its result ready (no copy of the output to numpy), against
`comm.Allreduce(x, recv)` on the same buffer, and (where `import mpi4jax` works) against
`jax.jit(mpi4jax.allreduce)` on x already on the device, and the MPI handler alone on a
call frame laid out as XLA's (the compiled one and the Python one: `handler_calls`) -- in
alternating rounds between barriers (the slowest rank's median per call, wall and the
process's CPU time), so a shared machine's load falls on all alike.  Ratios are over
mpi4py's time.  XLAPLUG_MPI_HANDLER=python registers the Python handler with XLA (the
engine as it was before the compiled one).  The load average before and after is printed:
above 0.5 the figures are noise, not measurements.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

# The all-reduce module, iteration counts, alternating-round timing and mpiexec of
# collectives.py (this script's sibling: the same measurement against another engine).
from collectives import ALLREDUCE_HLO, _mpiexec, iterations

ROOT = Path(__file__).resolve().parent.parent
SIZES = [1 << 20, 16 << 20]


def engine_call(text: str, grid, rank: int, x: np.ndarray, timeout: float = 120.0):
    """fn() -> the all-reduced x: the rank's program as the engine makes it and keeps it
    (MpiProgram: lowered, rewritten for MPI, compiled once by XLA:CPU), its collectives on
    a prepared MpiTransport in the context the program's handler runs them in."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import xlaplug
    from xlaplug.backends.spmd.place import Place
    from xlaplug.backends.spmd.mpi import MpiTransport
    from xlaplug.runtime.mpi_engine import MpiProgram
    from xlaplug.runtime.options import RunOptions
    from xlaplug.runtime.spmd.runner import collective_groups
    exe = xlaplug.compile(text, keep_source=True)
    program = MpiProgram(exe, grid, rank)
    ctx = program.context(RunOptions(engine="xla"))
    transport = MpiTransport(timeout)
    transport.prepare(collective_groups(program.module, grid))
    ctx.begin_run(spmd=Place(grid, rank, transport))  # held for the benchmark's calls
    compiled, devs = program.compiled
    sharding = NamedSharding(Mesh(np.array(devs), ("d",)), PartitionSpec())
    arg = jax.make_array_from_single_device_arrays(x.shape, sharding,
                                                   [jax.device_put(x, devs[0])])

    def call():
        (out,) = compiled.execute_sharded([arg]).disassemble_into_single_device_arrays()
        return out[0].block_until_ready()
    call.program = program  # (kept: its handler binding goes with it, and the compiled
    return call             # text names that binding)


def handler_calls(call, x: np.ndarray) -> dict:
    """{name: fn()} calling the MPI handler itself (no XLA around it) on a call frame laid
    out as XLA's over x, a result buffer and the order tokens: the compiled handler
    (xla/ffi/mpi_native.py; absent with XLAPLUG_MPI_HANDLER=python) and the Python one,
    through their C entry points.  Call `call` once before: its program's site is armed."""
    import ctypes

    from xlaplug.xla.ffi import abi
    program = call.program
    h = program.handler
    out, tokens = np.empty_like(x), [np.zeros((), np.uint32), np.zeros((), np.uint32)]
    keep = [out, tokens]

    def kept(obj):
        keep.append(obj)
        return obj

    def args(arrays, codes):
        ptrs = [ctypes.addressof(kept(abi.Buffer(
            ctypes.sizeof(abi.Buffer), None, c, a.ctypes.data, a.ndim,
            ctypes.cast(kept((ctypes.c_int64 * max(a.ndim, 1))(*a.shape)),
                        ctypes.POINTER(ctypes.c_int64))))) for a, c in zip(arrays, codes)]
        return abi.Args(ctypes.sizeof(abi.Args), None, len(ptrs),
                        ctypes.cast(kept((ctypes.c_int * 2)(1, 1)), ctypes.POINTER(ctypes.c_int)),
                        ctypes.cast(kept((ctypes.c_void_p * 2)(*ptrs)),
                                    ctypes.POINTER(ctypes.c_void_p)))
    attrs = {"run": program.key, "index": 0, **({"sites": h.sites} if h.sites else {})}
    names = [kept(ctypes.create_string_buffer(k.encode())) for k in attrs]
    spans = [kept(abi.ByteSpan(ctypes.addressof(n), len(k))) for n, k in zip(names, attrs)]
    values = [kept(ctypes.c_int64(v)) for v in attrs.values()]
    scalars = [kept(abi.Scalar(abi.DTYPE_CODES["s64"], ctypes.addressof(v))) for v in values]
    n = len(attrs)
    f = kept(abi.CallFrame())
    f.struct_size, f.stage = ctypes.sizeof(abi.CallFrame), abi.STAGE_EXECUTE
    f.args, f.rets = args([x, tokens[0]], [11, 8]), args([out, tokens[1]], [11, 8])
    f.attrs = abi.Attrs(ctypes.sizeof(abi.Attrs), None, n,
                        ctypes.cast(kept((ctypes.c_int * n)(*[abi.ATTR_SCALAR] * n)),
                                    ctypes.POINTER(ctypes.c_int)),
                        ctypes.cast(kept((ctypes.POINTER(abi.ByteSpan) * n)(
                            *[ctypes.pointer(s) for s in spans])),
                            ctypes.POINTER(ctypes.POINTER(abi.ByteSpan))),
                        ctypes.cast(kept((ctypes.c_void_p * n)(
                            *[ctypes.addressof(s) for s in scalars])),
                            ctypes.POINTER(ctypes.c_void_p)))
    frame = ctypes.addressof(f)
    ways = {"python_handler": h.python_address}
    if h.cfunc is not None:
        ways["compiled_handler"] = h.address
    fns = {}
    for name, address in ways.items():
        fn = abi.HANDLER(address)

        def run(fn=fn):
            if fn(frame):
                raise RuntimeError(f"the handler failed: {program.binding.failure}")
        run.keep, run.out = keep, out
        fns[name] = run
    return fns


def mpi4jax_call(comm, x: np.ndarray):
    """fn() -> x all-reduced by mpi4jax inside `jax.jit` (its own XLA FFI handler, C++), or
    None where mpi4jax is not installed (see benchmarks/README.md: it builds from source)."""
    try:
        import mpi4jax
    except ImportError:
        return None
    import jax
    from mpi4py import MPI
    f = jax.jit(lambda v: mpi4jax.allreduce(v, op=MPI.SUM, comm=comm))
    arg = jax.device_put(x)
    return lambda: f(arg).block_until_ready()


def timed_ab(fns: dict, iters: int, barrier, rounds: int = 7) -> dict:
    """collectives._timed_ab's alternating rounds, with the process's CPU time per call too
    (`<name>_cpu`): steadier than wall time on a loaded machine, where a rank waits for a
    peer the scheduler left out."""
    import statistics
    import time
    for fn in fns.values():  # warm-up
        fn()
        fn()
    wall: dict = {k: [] for k in fns}
    cpu: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(iters):
                fn()
            wall[k].append((time.perf_counter() - t0) / iters)
            cpu[k].append((time.process_time() - c0) / iters)
    return {**{k: statistics.median(v) for k, v in wall.items()},
            **{f"{k}_cpu": statistics.median(v) for k, v in cpu.items()}}


def worker(sizes: list[int]) -> None:
    sys.path.insert(0, str(ROOT))
    from mpi4py import MPI

    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.runtime.mpi_engine import keep_freed_buffers, spare_the_cores
    comm = MPI.COMM_WORLD
    rank, d = comm.Get_rank(), comm.Get_size()
    spare_the_cores(d)  # as the engine does, before jax starts
    keep_freed_buffers()
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        call = engine_call(ALLREDUCE_HLO.format(d=d, n=n), DeviceGrid(d, 1), rank, x)
        recv = np.empty_like(x)
        comm.Allreduce(x, recv, op=MPI.SUM)
        agree = bool(np.allclose(np.asarray(call()), recv, rtol=1e-5, atol=1e-5))
        ways = {"engine": call, "mpi4py": lambda: comm.Allreduce(x, recv, op=MPI.SUM),
                **handler_calls(call, x)}
        for k in ("compiled_handler", "python_handler"):
            if k in ways:
                ways[k]()
                agree &= bool(np.allclose(ways[k].out, recv, rtol=1e-5, atol=1e-5))
        jax_call = mpi4jax_call(comm, x)
        if jax_call is not None:
            agree &= bool(np.allclose(np.asarray(jax_call()), recv, rtol=1e-5, atol=1e-5))
            ways["mpi4jax"] = jax_call
        t = timed_ab(ways, iterations(nbytes), comm.Barrier)
        rows.append({"bytes": nbytes, "agree": comm.allreduce(agree, op=MPI.LAND),
                     **{f"{k}_s": comm.allreduce(v, op=MPI.MAX) for k, v in t.items()}})
    if rank == 0:
        print(json.dumps(rows))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--devices", default="2,4")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.worker:
        worker(sizes)
        return 0
    report = {"cores": os.cpu_count(), "load_before": os.getloadavg()[0], "runs": {}}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAX_PLATFORMS="cpu")
    for d in [int(x) for x in a.devices.split(",")]:
        report["runs"][d] = []
        for size in sizes:  # a process per size: one transport, as `xlaplug run` has
            p = subprocess.run([_mpiexec(), "-n", str(d), sys.executable, __file__,
                                "--worker", "--sizes", str(size)], capture_output=True,
                               text=True, env=env, timeout=900)
            if p.returncode != 0:
                print(f"D={d}: the workers failed: {p.stderr.strip().splitlines()[-1:]}",
                      file=sys.stderr)
                return 1
            report["runs"][d] += json.loads(p.stdout.strip().splitlines()[-1])
    report["load_after"] = os.getloadavg()[0]
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    quiet = max(report["load_before"], report["load_after"]) <= 0.5
    print(f"# {report['cores']} cores, load average {report['load_before']:.2f} before, "
          f"{report['load_after']:.2f} after" +
          ("" if quiet else " -- above 0.5: noise, not figures to quote"))
    print("\n| D | size | engine ms | mpi4py ms | mpi4jax ms | engine/mpi4py | "
          "mpi4jax/mpi4py | compiled handler alone | Python handler alone | CPU us engine / "
          "mpi4py | agree |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |")
    bad = False
    for d, rows in report["runs"].items():
        for r in rows:
            jx, raw = r.get("mpi4jax_s"), r["mpi4py_s"]
            jax_ms, jax_ratio = ("-", "-") if jx is None else (f"{jx * 1e3:.3f}",
                                                              f"{jx / raw:.2f}x")
            size = f"{r['bytes'] >> 20} MiB" if r["bytes"] >= 1 << 20 else \
                f"{r['bytes'] >> 10} KiB" if r["bytes"] >= 1 << 10 else f"{r['bytes']} B"
            alone = [f"{r[k] / raw:.2f}x" if k in r else "-"
                     for k in ("compiled_handler_s", "python_handler_s")]
            print(f"| {d} | {size} | {r['engine_s'] * 1e3:.3f} | "
                  f"{raw * 1e3:.3f} | {jax_ms} | {r['engine_s'] / raw:.2f}x | {jax_ratio} | "
                  f"{alone[0]} | {alone[1]} | {r['engine_cpu_s'] * 1e6:.1f} / "
                  f"{r['mpi4py_cpu_s'] * 1e6:.1f} | {'yes' if r['agree'] else 'NO'} |")
            bad |= not r["agree"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
