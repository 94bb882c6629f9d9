"""All-reduce across devices: xlaplug against raw mpi4py and jax, measured in the same run.

    python benchmarks/collectives.py            # D = 2 and 4, 4 KiB .. 64 MiB (~2-4 min)
    python benchmarks/collectives.py --quick    # 4 KiB .. 1 MiB, D = 2
    python benchmarks/collectives.py --json

Across processes (one device per process):
  xlaplug   `mpiexec -n D`: an HLO module holding one f32 all-reduce (sum over all replicas)
            run by xlaplug's executor with its MPI transport (below 4 MiB one non-blocking
            MPI_Iallreduce polled against the collective timeout; from 4 MiB a polled
            barrier, then the blocking MPI_Allreduce into a reused receive buffer)
  mpi4py    the same buffer through `comm.Allreduce` (the floor xlaplug's transport adds to)
  jax       D processes with jax.distributed (gloo CPU collectives), a jitted shard_map psum
In one process, D = 4: xlaplug's threads against XLA:CPU with 4 host devices (the same
shard_map psum), and a data-parallel training step (MLP gradients, pmean, SGD).

Each figure is the median time of one all-reduce after warm-up (iterations between
barriers, so every rank measures the same window), xlaplug and its reference measured in
alternating rounds, so a shared machine's load falls on both alike.  Bus bandwidth = bytes * 2(D-1)/D / time,
as NCCL and Horovod report it.  Ratios are xlaplug's time over the other's (below 1: faster).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]

ALLREDUCE_HLO = """HloModule allreduce, replica_count={d}
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{n}] parameter(0)
  ROOT r = f32[{n}] all-reduce(x), replica_groups={{}}, to_apply=add
}}
"""


def iterations(nbytes: int) -> int:
    return max(5, min(200, (256 << 20) // max(nbytes, 1) // 8))


def _timed(fn, iters: int, barrier) -> float:
    return _timed_ab({"x": fn}, iters, barrier)["x"]


def _timed_ab(fns: dict, iters: int, barrier, rounds: int = 7) -> dict:
    """Median time per call of each function, measured in alternating rounds (A, B, A, B,
    ...) so that a shared machine's changing load falls on all of them alike."""
    for fn in fns.values():  # warm-up
        fn()
        fn()
    times: dict = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            times[k].append((time.perf_counter() - t0) / iters)
    return {k: statistics.median(v) for k, v in times.items()}


# ---- workers -------------------------------------------------------------------------------

def worker_mpi(sizes: list[int]) -> None:
    sys.path.insert(0, str(ROOT))
    from mpi4py import MPI

    from xlaplug.runtime.executor import ExecContext
    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.backends.spmd.place import Place
    from xlaplug.backends.spmd.mpi import MpiTransport
    from xlaplug.runtime.spmd.runner import collective_groups
    from xlaplug.hlo.text.parser import parse_module
    comm = MPI.COMM_WORLD
    rank, d = comm.Get_rank(), comm.Get_size()
    out = []
    for nbytes in sizes:
        n = nbytes // 4
        x = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        module = parse_module(ALLREDUCE_HLO.format(d=d, n=n))
        grid = DeviceGrid(d, 1)
        transport = MpiTransport(timeout=120)
        transport.prepare(collective_groups(module, grid))
        ctx = ExecContext("cpu", {}).begin_run(spmd=Place(grid, rank, transport))
        got = ctx.run(module.entry, [x])
        recv = np.empty_like(x)
        comm.Allreduce(x, recv, op=MPI.SUM)
        ok = bool(np.allclose(got, recv, rtol=1e-5, atol=1e-5))
        iters = iterations(nbytes)
        t = _timed_ab({"x": lambda: ctx.run(module.entry, [x]),
                       "m": lambda: comm.Allreduce(x, recv, op=MPI.SUM)}, iters, comm.Barrier)
        t_x, t_m = t["x"], t["m"]
        t_x, t_m = comm.allreduce(t_x, op=MPI.MAX), comm.allreduce(t_m, op=MPI.MAX)
        out.append({"bytes": nbytes, "xlaplug_s": t_x, "mpi4py_s": t_m, "agree": ok})
    if rank == 0:
        print(json.dumps(out))


def worker_jax(sizes: list[int], pid: int, d: int, port: int) -> None:
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=d,
                               process_id=pid)
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(np.array(jax.devices()), ("x",))
    f = jax.jit(shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"),
                          out_specs=P("x")))
    barrier_x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")),
                                                       np.zeros(1, np.float32))
    barrier = lambda: f(barrier_x).block_until_ready()  # noqa: E731
    out = []
    for nbytes in sizes:
        local = np.random.default_rng(pid).standard_normal(nbytes // 4).astype(np.float32)
        x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("x")), local)
        t = _timed(lambda: f(x).block_until_ready(), iterations(nbytes), barrier)
        out.append({"bytes": nbytes, "jax_s": t})
    if pid == 0:
        print(json.dumps(out))


def worker_inprocess(sizes: list[int], d: int) -> None:
    """xlaplug's threads and XLA:CPU with d host devices, one process."""
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={d}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(ROOT))
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map

    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.hlo.text.parser import parse_module
    mesh = Mesh(np.array(jax.devices()[:d]), ("x",))
    f = jax.jit(shard_map(lambda a: jax.lax.psum(a, "x"), mesh=mesh, in_specs=P("x"),
                          out_specs=P("x")))
    nothing = lambda: None  # noqa: E731
    out = []
    for nbytes in sizes:
        n = nbytes // 4
        parts = [np.random.default_rng(i).standard_normal(n).astype(np.float32)
                 for i in range(d)]
        module = parse_module(ALLREDUCE_HLO.format(d=d, n=n))
        args = [[p] for p in parts]
        iters = max(3, iterations(nbytes) // 4)
        x = jax.device_put(np.concatenate(parts), NamedSharding(mesh, P("x")))
        t = _timed_ab({"x": _compiled_once(module, args, DeviceGrid(d, 1)),
                       "j": lambda: f(x).block_until_ready()}, iters, nothing)
        t_x, t_j = t["x"], t["j"]
        out.append({"bytes": nbytes, "xlaplug_s": t_x, "xla_s": t_j})
    out.append(_training_step(d))
    print(json.dumps(out))


def _compiled_once(module, args, grid):
    """A run of `module` on every device with each device's context (its thunk sequences,
    compiled kernels) and thread made once and kept, as XLA keeps its executable."""
    from xlaplug.runtime.executor import ExecContext
    from xlaplug.runtime.spmd.runner import devices_for, run_devices
    contexts = [ExecContext("cpu", {}) for _ in range(grid.count)]
    threads = devices_for(module, grid.count)  # as `xlaplug run` chooses; kept to the end
    return lambda: run_devices(module, args, grid, lambda d: contexts[d], 60.0, threads)


def _training_step(d: int) -> dict:
    """MLP gradients, pmean, SGD on d devices: XLA's compiled program run by both."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:  # pragma: no cover - older jax
        from jax.experimental.shard_map import shard_map

    from xlaplug.backends.spmd.groups import DeviceGrid
    from xlaplug.runtime.spmd.runner import run_module_devices
    from xlaplug.hlo.text.parser import parse_module
    mesh = Mesh(np.array(jax.devices()[:d]), ("x",))

    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    def step(w1, w2, x, y):
        g = jax.grad(loss)((w1, w2), x, y)
        g = jax.tree.map(lambda t: jax.lax.pmean(t, "x"), g)
        return w1 - 0.1 * g[0], w2 - 0.1 * g[1]
    fn = jax.jit(shard_map(step, mesh=mesh, in_specs=(P(), P(), P("x"), P("x")),
                           out_specs=(P(), P()), check_vma=False))
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.1 for s in ((256, 512), (512, 64)))
    x = rng.standard_normal((64 * d, 256)).astype(np.float32)
    y = rng.standard_normal((64 * d, 64)).astype(np.float32)
    compiled = fn.lower(w1, w2, x, y).compile()
    module = parse_module(compiled.as_text())
    args = [[w1, w2, x[64 * i:64 * (i + 1)], y[64 * i:64 * (i + 1)]] for i in range(d)]
    ours = run_module_devices(module, args, DeviceGrid(1, d))
    theirs = compiled(w1, w2, x, y)
    ok = all(np.allclose(o, np.asarray(t), rtol=1e-4, atol=1e-5)
             for o, t in zip(ours[0], theirs))
    nothing = lambda: None  # noqa: E731
    t = _timed_ab({"x": _compiled_once(module, args, DeviceGrid(1, d)),
                   "j": lambda: jax.block_until_ready(compiled(w1, w2, x, y))}, 5, nothing)
    t_x, t_j = t["x"], t["j"]
    return {"workload": f"data-parallel MLP step 256x512x64, batch 64/device, D={d}",
            "xlaplug_s": t_x, "xla_s": t_j, "agree": ok}


# ---- the driver -----------------------------------------------------------------------------

def _run(cmd: list[str], env=None, timeout: float = 1200) -> list:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _jax_processes(sizes, d) -> list | str:
    port = _free_port()
    script = str(Path(__file__).resolve())
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, script, "--worker", "jax", "--pid", str(i),
                               "--n", str(d), "--port", str(port), "--sizes",
                               ",".join(map(str, sizes))], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for i in range(d)]
    outs = [p.communicate(timeout=1200) for p in procs]
    if any(p.returncode for p in procs):
        return "jax.distributed failed: " + outs[0][1].strip().splitlines()[-1][:120]
    return json.loads(outs[0][0].strip().splitlines()[-1])


def _mpiexec() -> str:
    exe = Path(sys.executable).with_name("mpiexec")
    return str(exe) if exe.exists() else "mpiexec"


def fmt_ms(s) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=["mpi", "jax", "inprocess"])
    ap.add_argument("--sizes", default=None)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--devices", default="2,4")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")] if a.sizes else (
        SIZES[:3] if a.quick else SIZES)
    if a.worker == "mpi":
        worker_mpi(sizes)
        return 0
    if a.worker == "jax":
        worker_jax(sizes, a.pid, a.n, a.port)
        return 0
    if a.worker == "inprocess":
        worker_inprocess(sizes, a.n)
        return 0
    devices = [2] if a.quick else [int(x) for x in a.devices.split(",")]
    script = str(Path(__file__).resolve())
    report = {"cores": os.cpu_count(), "load_average": os.getloadavg()[0], "across": {},
              "inprocess": None}
    for d in devices:
        mpi = _run([_mpiexec(), "-n", str(d), sys.executable, script, "--worker", "mpi",
                    "--sizes", ",".join(map(str, sizes))])
        jx = _jax_processes(sizes, d)
        for row, j in zip(mpi, jx if isinstance(jx, list) else [None] * len(mpi)):
            row["jax_s"] = j["jax_s"] if j else None
        report["across"][d] = {"rows": mpi, "jax_note": None if isinstance(jx, list) else jx}
    d_in = 4 if not a.quick else 2
    report["inprocess"] = {"devices": d_in, "rows": _run(
        [sys.executable, script, "--worker", "inprocess", "--n", str(d_in), "--sizes",
         ",".join(map(str, sizes))])}
    report["load_average_after"] = os.getloadavg()[0]
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"# {report['cores']} cores, load average {report['load_average']:.2f} before, "
          f"{report['load_average_after']:.2f} after")
    print("\n## Across processes: all-reduce of f32, sum over D processes\n")
    print("| D | size | xlaplug ms | mpi4py ms | jax (gloo) ms | xlaplug bus GB/s | "
          "xlaplug/mpi4py | xlaplug/jax |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    bad = False
    for d, block in report["across"].items():
        for r in block["rows"]:
            bus = r["bytes"] * 2 * (d - 1) / d / r["xlaplug_s"] / 1e9
            jr = f"{r['xlaplug_s'] / r['jax_s']:.2f}x" if r.get("jax_s") else "-"
            print(f"| {d} | {_size(r['bytes'])} | {fmt_ms(r['xlaplug_s'])} | "
                  f"{fmt_ms(r['mpi4py_s'])} | {fmt_ms(r.get('jax_s'))} | {bus:.2f} | "
                  f"{r['xlaplug_s'] / r['mpi4py_s']:.2f}x | {jr} |")
            bad |= not r["agree"]
        if block["jax_note"]:
            print(f"\n(D={d}: {block['jax_note']})")
    ip = report["inprocess"]
    print(f"\n## One process, D = {ip['devices']}: xlaplug threads vs XLA:CPU host devices\n")
    print("| workload | xlaplug ms | XLA:CPU ms | xlaplug/XLA |")
    print("| --- | ---: | ---: | ---: |")
    for r in ip["rows"]:
        what = r.get("workload") or f"all-reduce {_size(r['bytes'])}"
        print(f"| {what} | {fmt_ms(r['xlaplug_s'])} | {fmt_ms(r['xla_s'])} | "
              f"{r['xlaplug_s'] / r['xla_s']:.2f}x |")
        bad |= r.get("agree") is False
    if bad:
        print("WARNING: xlaplug's result disagreed with the reference", file=sys.stderr)
    return 1 if bad else 0


def _size(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


if __name__ == "__main__":
    sys.exit(main())
