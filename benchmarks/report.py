"""run.py's console report and the machine it describes: the header (options; CPU, cores,
load, numpy's BLAS as it runs, library versions -- `environment()`, also the --json record's;
a note when the load is over the usable cores), then the results table, one row per workload
with the ratios, and a line per workload with its checks, compile breakdown and buffer
sizes."""
from __future__ import annotations

import ctypes
import os
import platform

import numpy as np


def blas_info() -> str:
    """numpy's BLAS as it runs: threadpoolctl if installed, else OpenBLAS's own config call on
    the library numpy loaded, else np.show_config's build-time summary."""
    try:
        from threadpoolctl import threadpool_info
        for d in threadpool_info():
            if d.get("user_api") == "blas":
                return (f"{d.get('internal_api')} {d.get('version')} "
                        f"arch={d.get('architecture')} threads={d.get('num_threads')} "
                        f"({d.get('filepath')}) [threadpoolctl]")
    except ImportError:
        pass
    try:
        paths = sorted({ln.split()[-1] for ln in open("/proc/self/maps")
                        if "openblas" in ln.lower() and ln.split()[-1].startswith("/")})
        for p in paths:
            lib = ctypes.CDLL(p)
            for prefix, suffix in (("scipy_openblas", "64_"), ("scipy_openblas", ""),
                                   ("openblas", "64_"), ("openblas", "")):
                cfg = getattr(lib, f"{prefix}_get_config{suffix}", None)
                if cfg is None:
                    continue
                cfg.restype = ctypes.c_char_p
                text = cfg().decode().strip()
                extra = []
                core = getattr(lib, f"{prefix}_get_corename{suffix}", None)
                if core is not None:
                    core.restype = ctypes.c_char_p
                    extra.append(f"core={core().decode()}")
                nt = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                if nt is not None:
                    extra.append(f"threads={nt()}")
                where = f"[runtime, {os.path.basename(p)}]"
                return f"{' '.join(text.split())} {' '.join(extra)} {where}"
    except Exception:
        pass
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return (f"{cfg.get('name')} {cfg.get('version')}: "
                f"{cfg.get('openblas configuration', '')} [np.show_config, build-time]")
    except Exception as e:
        return f"unknown ({e})"


def environment() -> dict:
    import jax
    try:
        import numba
        numba_v, numba_threads = numba.__version__, numba.config.NUMBA_NUM_THREADS
    except ImportError:
        numba_v, numba_threads = None, None
    cpu = platform.processor() or ""
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "python": platform.python_version(), "numpy": np.__version__, "jax": jax.__version__,
        "numba": numba_v, "numba_threads": numba_threads,
        "cpu": cpu, "cores": os.cpu_count(), "cores_usable": usable,
        "numpy_blas": blas_info(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "NUMBA_CPU_NAME": os.environ.get("NUMBA_CPU_NAME"),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "cpu_held": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        and usable == 1 else None,
    }


def print_header(env: dict, opts) -> None:
    """The run's options and the machine, above the table."""
    print(f"xlaplug benchmark: device={opts.device}, repeat={opts.repeat} (median, warm-up "
          f"excluded){', QUICK sizes' if opts.quick else ''}")
    print(f"cpu: {env['cpu']}, {env['cores']} cores ({env['cores_usable']} usable); "
          f"load avg {', '.join(f'{v:.2f}' for v in env['loadavg_start'] or [])}")
    print(f"numpy {env['numpy']} BLAS: {env['numpy_blas']}")
    print(f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}  "
          f"OPENBLAS_NUM_THREADS={env['OPENBLAS_NUM_THREADS']}  jax {env['jax']} "
          f"(XLA:CPU)  numba {env['numba']} ({env['numba_threads']} threads)  "
          f"python {env['python']}")
    if getattr(opts, "cores", "every") != "every" and opts.device == "cpu":
        print("one-core column: a child process on one CPU (its affinity), numba, OpenBLAS, "
              "OpenMP and MKL set to 1 thread; XLA sizes its pools from the affinity")
    if env.get("NUMBA_CPU_NAME"):
        print(f"code for: numba NUMBA_CPU_NAME={env['NUMBA_CPU_NAME']}, XLA_FLAGS="
              f"{env.get('XLA_FLAGS')} (not this CPU's own instruction set)")
    elif env["OPENBLAS_CORETYPE"]:
        # Some machines set these for old OpenBLAS builds that miscompute on their CPU; a
        # current numpy then runs an older kernel than on a user's machine (Haswell's AVX2
        # sgemm at half the speed of SkylakeX's AVX-512 one on a Zen 4), and every product
        # and convolution ratio here is against that handicap.
        print(f"NOTE: OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} pins numpy's BLAS kernel "
              "(xlaplug's products run on it): for the kernel numpy picks by itself, run "
              "with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`.")
    load = (env["loadavg_start"] or [0])[0]
    if load > (env["cores_usable"] or 1):
        print(f"NOTE: 1-minute load average {load:.2f} exceeds the {env['cores_usable']} "
              "usable cores: other jobs share this machine, so timings are noisy "
              "(multithreaded BLAS calls especially).")
    print(flush=True)


COLUMNS = [("workload", 17), ("xlaplug ms", 11), ("XLA:CPU ms", 11), ("numpy ms", 10),
           ("xlaplug/XLA", 12), ("load", 5), ("1 core: xlaplug/XLA", 20), ("load", 5),
           ("xlaplug/np", 11), ("xlaplug compile ms", 19),
           ("xlaplug 1st-run +ms", 20), ("XLA compile ms", 15)]


def fmt(v, kind="ms") -> str:
    if v is None:
        return "-"
    if kind == "ratio":
        return f"{v:.2f}x"
    if kind == "load":
        return f"{v:.2f}"
    return f"{v:.3f}" if v < 1 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def print_table(results: list[dict]) -> None:
    print("  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(COLUMNS)))
    print_rows(results)
    gpu = [r for r in results if "xla_gpu" in r]
    if gpu:
        print()
        for r in gpu:
            g = r["xla_gpu"]
            if "unavailable" in g:
                print(f"  {r['workload']:<17} XLA:GPU: not measured: {g['unavailable']}")
            else:
                check = "ok" if g["matches_xla_cpu"] else "MISMATCH"
                print(f"  {r['workload']:<17} XLA:GPU {fmt(g['run_ms'])} ms (compile "
                      f"{fmt(g['compile_ms'])} ms, vs XLA:CPU {check}); xlaplug/XLA:GPU "
                      f"{fmt(r['ratio_xlaplug_xla_gpu'], 'ratio')}")


def one_core_cells(one: dict | None) -> list[str]:
    """The one-core ratio (with both held to one core) and the load when it started."""
    if one is None:
        return ["-", "-"]
    if one.get("matches_xla") is False:
        return ["MISMATCH", fmt(one.get("load"), "load")]
    return [fmt(one.get("ratio_xlaplug_xla"), "ratio"), fmt(one.get("load"), "load")]


def print_rows(results: list[dict]) -> None:
    for r in results:
        x = r["xlaplug"]
        cells = [r["workload"], fmt(x.get("run_ms")) if "error" not in x else "ERROR",
                 fmt(r["xla"]["run_ms"]), fmt(r["numpy"].get("run_ms")),
                 fmt(r["ratio_xlaplug_xla"], "ratio"), fmt(r.get("load"), "load"),
                 *one_core_cells(r.get("one_core")), fmt(r["ratio_xlaplug_numpy"], "ratio"),
                 fmt(x.get("compile_ms")), fmt(x.get("first_run_overhead_ms")),
                 fmt(r["xla"]["compile_ms"])]
        print("  ".join(c.rjust(w) if i else c.ljust(w)
                        for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS))))
    print()
    for r in results:
        x = r["xlaplug"]
        check = "ERROR" if "error" in x else ("ok" if x["matches_xla"] else "MISMATCH")
        if "matches_xla" in r["numpy"]:
            check += f", numpy vs XLA: {'ok' if r['numpy']['matches_xla'] else 'MISMATCH'}"
        parts = f"parse {fmt(x.get('parse_ms'))} + pipeline {fmt(x.get('pipeline_ms'))}"
        if "setup_ms" in x:
            parts += f" + setup {fmt(x['setup_ms'])} ms; first run {fmt(x['first_run_ms'])} ms"
        mine, xla = x.get("peak_bytes"), r["xla"].get("peak_bytes")
        if mine is not None and xla:
            parts += (f"; buffers {mine / 2**20:.2f} MiB vs XLA's {xla / 2**20:.2f} MiB "
                      f"({mine / xla:.2f}x)")
        print(f"  {r['workload']:<17} {r['desc']}; xlaplug vs XLA: {check}; {parts}")
