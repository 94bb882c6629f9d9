"""The order test files go out to xdist's workers (conftest.py sorts the items with `order`).

`pytest -n 3 --dist loadfile --no-loadscope-reorder` hands each worker whole files in
collection order, the next file when the worker has two tests or fewer left.  Files that
take long must go out first: one started late runs alone at the end while the other workers
have nothing left (xdist's own order, by tests per file, sends the conformance suite's 9
tests last).  The marks alone (suite, then files with many `slow` tests) left files of
many short tests late -- test_dot_epilogue (30 s) went out 88th of 124 files,
test_small_regions (22 s) 119th -- so files are ordered by what they took, then by the marks.

FILE_SECONDS: each file's summed test time (wall s, on 2 cores under the suite's own load of
~3, a fresh JIT cache) from `pytest -q --durations=0` of the whole suite, files of 8 s or
more; the rest follow in the marks' order.  A stale figure only orders a file worse: re-take
them when files grow or move.  A simulation of the loadfile schedule with the per-file times
gives 617 s for this order against 627 s for the marks' alone (sum / 3 workers: 602 s).
"""
from __future__ import annotations

import collections

FILE_SECONDS = {  # 2026-12-06 20:42 UTC profile, main 1fd6815
    "test_conformance_stablehlo": 142, "test_elementwise": 79, "test_compiled_while": 73,
    "test_engine_xla_mpi": 58, "test_benchmarks": 56, "test_cuda_corpus": 49,
    "test_conformance_jax": 49, "test_reduce_fusion": 48, "test_docs_plugins": 47,
    "test_linalg": 46, "test_jax_lapack": 44, "test_mpi_agreement": 43,
    "test_rng_fft": 43, "test_spmd_jax": 42, "test_reduce": 40,
    "test_lapack_decompositions": 39, "test_multi_device_cli": 39,
    "test_engine_xla_mpi_compiled": 36, "test_check_plugins_xla": 32,
    "test_lapack_decomposition_edges": 30, "test_dot_epilogue": 30, "test_fuzz": 29,
    "test_scalar_jit": 28, "test_plugins": 27, "test_loop_fusion": 24,
    "test_gather_scatter": 23, "test_data_movement": 23, "test_complex_paths": 23,
    "test_libm32": 22, "test_engine_devices": 22, "test_small_regions": 22,
    "test_fused_vectorize": 21, "test_compile_scaling": 20, "test_jit_cache_healing": 19,
    "test_startup_imports": 19, "test_jax_mpi": 17, "test_ffi_compiled_handler": 17,
    "test_ffi_handler_cache": 17, "test_readme": 17, "test_cli": 16, "test_run_path": 16,
    "test_parser_fast": 15, "test_horovod": 14, "test_jax_op": 12, "test_passes": 12,
    "test_hardware_flush": 12, "test_docs_plugins_devices": 12, "test_cli_messages": 11,
    "test_check_plugins_jax": 11, "test_jit_cache": 10, "test_portable": 10,
    "test_engine_devices_overrides": 10, "test_cuda_narrow": 10, "test_input_checks": 10,
    "test_conv_chunks": 10, "test_parser_faults": 10, "test_jit_locks": 8,
    "test_ffi_python_handler": 8,
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
