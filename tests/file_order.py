"""The order test files go out to xdist's workers (conftest.py sorts the items with `order`).

`pytest -n 3 --dist loadfile --no-loadscope-reorder` hands each worker whole files in
collection order, the next file when the worker has two tests or fewer left.  Files that
take long must go out first: one started late runs alone at the end while the other workers
have nothing left (xdist's own order, by tests per file, sends the conformance suite's 9
tests last).  The marks alone (suite, then files with many `slow` tests) left files of
many short tests late -- test_dot_epilogue (30 s) went out 88th of 124 files,
test_small_regions (22 s) 119th -- so files are ordered by what they took, then by the marks.

FILE_SECONDS: each file's summed test time from `pytest --durations=0` of the whole suite
(3 workers on 2 cores, a fresh JIT cache), files of 8 s or more; the rest follow in the
marks' order.  The last run (22:13 UTC) had another process's load beside it (load 4-5,
816 s): its figures are scaled by 575.8/816.4, the quiet run's time on the same code, so
they read as seconds of a quiet run.  A stale figure only orders a file worse: re-take them
when files grow or move.  That run's per-worker sums were 779, 781 and 783 s: a simulation
of the loadfile schedule gives 784 s for the old table's order and 781 s for this one
(sum / 3 workers: 780 s) -- the order is near the bound, the time is in the tests.
test_engine_devices is left out: one of its tests hung to its 60 s timeout in that run
(about 7 s without it).  test_ptx holds the PTX checks five files had (one process for all:
their summed walls of the 2026-12-07 00:40 run, 56 s, less the CPU one process saves, scaled
as above); those five files' figures are lowered by what their PTX tests took.  Files whose
commands now run in the worker (tests/cli_in_process.py) are scaled by their -n 0 wall
before and after (test_spmd_jax 0.57, test_multi_device_cli 0.83); test_input_checks,
test_cli_messages, test_examples and test_output_files fell under 8 s and left the table.
"""
from __future__ import annotations

import collections

FILE_SECONDS = {  # 2026-12-06 22:13 UTC run, branch suite2 on 1d264cf
    "test_conformance_stablehlo": 168, "test_elementwise": 88,
    "test_compiled_while": 80, "test_lapack_decompositions": 59, "test_spmd_jax": 33,
    "test_benchmarks": 50, "test_engine_xla_mpi": 39,
    "test_jax_lapack": 23, "test_conformance_jax": 39, "test_linalg": 34,
    "test_reduce_fusion": 36, "test_reduce": 33, "test_ptx": 35, "test_multi_device_cli": 28,
    "test_docs_plugins": 30, "test_rng_fft": 26, "test_engine_xla_mpi_compiled": 29,
    "test_mpi_agreement": 27, "test_xla_without_jax": 27, "test_cuda_corpus": 26,
    "test_scalar_jit": 22,
    "test_small_regions": 19, "test_dot_epilogue": 19, "test_plugins": 19,
    "test_check_plugins_xla": 17, "test_jit_cache": 17, "test_ffi_compiled_handler": 17,
    "test_jax_mpi": 15, "test_readme": 15, "test_fused_vectorize": 15,
    "test_lapack_decomposition_edges": 15, "test_jit_cache_healing": 15, "test_cli": 14,
    "test_portable": 14, "test_ffi_register": 13, "test_run_path": 13,
    "test_ffi_handler_cache": 13, "test_engine_devices_overrides": 13,
    "test_gather_scatter": 13, "test_data_movement": 13, "test_conv_chunks": 13,
    "test_startup_imports": 12, "test_region_flushes": 12, "test_ffi_python_handler": 12,
    "test_parser_faults": 11, "test_xla_bridge": 11, "test_verifier": 11,
    "test_jax_builder": 10, "test_jit_locks": 10, "test_layering": 10,
    "test_docs_plugins_devices": 10, "test_complex_paths": 9, "test_compile_scaling": 9,
    "test_jax_op": 9, "test_cuda_narrow": 9,
    "test_excess_precision": 8, "test_startup": 8,
}


def short_name(item) -> str:
    return item.module.__name__.rpartition(".")[2]


def order(items: list) -> None:
    """Sorts `items` (in place, stable) so files go out longest first: by FILE_SECONDS,
    then -- for files not listed -- suite files, then files with slow tests (more first)."""
    rank: dict = {}
    slow = collections.Counter()
    for item in items:
        name = short_name(item)
        r = 0 if item.get_closest_marker("suite") else 1 if item.get_closest_marker("slow") else 2
        rank[name] = min(rank.get(name, 2), r)
        slow[name] += bool(item.get_closest_marker("slow"))
    items.sort(key=lambda it: (-FILE_SECONDS.get(short_name(it), 0), rank[short_name(it)],
                               -slow[short_name(it)]))
