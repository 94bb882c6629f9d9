"""Shared pytest fixtures."""
import os
import sys
from pathlib import Path

import pytest

# CUDA tests run under numba's simulator unless told otherwise (scripts/gpu_check.sh sets
# NUMBA_ENABLE_CUDASIM=0 on a GPU machine).  Set before anything imports numba.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # so tests can `import jax_corpus` under any import mode
    sys.path.insert(0, _TESTS)


def _sigint_state() -> tuple:
    """This thread's blocked and this process's ignored signals as the kernel has them (C
    code can change either behind Python's back): what a process started now inherits."""
    try:
        with open("/proc/thread-self/status") as f:
            return tuple(ln.strip() for ln in f if ln.startswith(("SigBlk", "SigIgn")))
    except OSError:
        return ()


@pytest.fixture(autouse=True)
def _signals_left_as_found():
    """A test that leaves a signal blocked or ignored in its worker passes that on to every
    process the worker starts after it -- the Ctrl-C tests' children then never hear SIGINT
    (seen as a flaky 30 s hang that depended on which tests shared a worker).  So the test
    that changed them fails, by name."""
    before = _sigint_state()
    yield
    after = _sigint_state()
    if after != before:
        pytest.fail(f"the test left this worker's signals changed: {before} -> {after}")


@pytest.fixture(scope="session", autouse=True)
def _cuda_simulator_waits():
    """Under numba's CUDA simulator, its block manager waits for a block's threads instead
    of polling them (tests/cudasim_threads.py): the same kernels, without the spin."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        import cudasim_threads
        cudasim_threads.install()


@pytest.fixture(scope="session", autouse=True)
def _xla_executables_shared(tmp_path_factory):
    """XLA compiles a program once per run, not once per test file that needs it: its
    executable is shared by the run's workers (tests/xla_session_cache.py)."""
    import xla_session_cache
    with pytest.MonkeyPatch.context() as mp:
        xla_session_cache.install(xla_session_cache.session_dir(tmp_path_factory), mp)
        yield


@pytest.fixture(scope="session")
def jax_corpus():
    """Every program of tests/jax_corpus.py as an Entry (name, lowered_hlo, compiled_hlo,
    inputs, outputs, x64); generated once, then read from tests/.corpus_cache/."""
    import jax_corpus as corpus
    return corpus.load_corpus()


# ---- the bundled plugins, for the jax_lapack tests (CPU and CUDA) ---------------------------

@pytest.fixture(scope="module")
def registry():
    """The bundled plugins, loaded once per module (entry points and XLAPLUG_PLUGIN_PATH off)."""
    from xlaplug.plugin import load_plugins
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("XLAPLUG_PLUGIN_PATH", raising=False)
        return load_plugins(entry_points=False)


@pytest.fixture
def lapack(registry):
    """The bundled plugins' registry, jax_lapack among them: a test makes its sessions from
    it (`Session(lapack, device=...)`)."""
    assert any(p.name == "jax_lapack" for p in registry.plugins), \
        [r.error for r in registry.records if r.error]
    return registry



# ---- markers (registered in setup.cfg) -----------------------------------------------------
# Whole files are marked here by what they need (cuda, jax, suite), and `slow` tests by name
# in SLOW below; CUDA-only tests and tests/devices.py's cuda parameter carry `cuda` too.

# The StableHLO conformance suite and the runs over the whole jax corpus.
SUITE_MODULES = {"test_conformance_stablehlo", "test_conformance_jax", "test_corpus_roundtrip",
                 "test_cuda_corpus"}


# Test functions (every parameter of them) that take more than a few seconds on two loaded
# cores: each case's mean >= 0.4 s or one case >= 2 s in `pytest --durations=0` of the
# whole suite (the CUDA ones under the simulator).  Re-measure and edit when tests move;
# `-m "not slow and not suite"` is the fast loop.
SLOW = {
    "test_output_files": {"test_outputs_take_the_users_umask",
        "test_dump_dir_creates_its_own_folder_but_not_the_ones_above"},
    "test_input_checks": {"test_a_dtype_that_differs_is_an_error_and_cast_converts_it",
        "test_a_missing_parameter_is_drawn_only_with_an_explicit_seed",
        "test_bf16_stored_by_npz_as_raw_bytes_is_read_as_bf16",
        "test_a_misnamed_key_is_an_error_listing_the_expected_ones",
        "test_a_shape_that_differs_is_an_error_naming_both",
        "test_one_file_holds_the_inputs_and_the_expected_outputs"},
    "test_api": {"test_errors_are_the_clis_messages", "test_many_devices_stacked_like_the_cli"},
    "test_benchmarks": {"test_cuda_without_gpu_is_one_line_exit_2",
        "test_model_workloads_run_and_match_xla", "test_scaling_sizes_match_xla"},
    "test_cli": {"test_bad_input_exit_2_one_line_no_traceback",
        "test_bad_pass_option_is_one_line_exit_2", "test_cuda_without_gpu_is_exit_2",
        "test_cuda_without_gpu_message_is_exactly_one_error", "test_missing_file_is_a_clear_error",
        "test_run_custom_call_without_plugin_names_target", "test_run_example_prints_table",
        "test_run_input_dtype_converted_only_with_cast_and_shape_checked", "test_run_inputs_out_expect_roundtrip",
        "test_run_memory_guard", "test_run_while_iteration_guard", "test_unknown_pass_is_exit_2"},
    "test_compiled_while": {"test_array_loops_compile_and_match_jax",
        "test_compiled_loop_matches_jax_and_the_interpreter",
        "test_corpus_program_fused_and_compiled",
        "test_crossed_leaves_and_passthrough_match_the_interpreter",
        "test_interpret_option_keeps_every_loop_and_fusion_interpreted",
        "test_loop_the_code_cannot_express_stays_interpreted",
        "test_sum_whose_partial_sum_is_subnormal_flushes_as_xla",
        "test_xla_optimized_loops_compile_with_their_fusions"},
    "test_complex_paths": {"test_every_path_still_matches_xla",
        "test_fused_unfused_and_cuda_give_the_same_bits"},
    "test_cuda_narrow": {"test_bf16_program_matches_jax", "test_float_formats_match_cpu",
        "test_sub_byte_integers_match_cpu"},
    "test_cuda_plugins": {"test_rms_norm_cuda_kernel_in_a_run_matches_cpu"},
    "test_data_movement": {"test_iota_types", "test_iota_x64_types",
        "test_transpose_then_reshape_bitcasts"},
    "test_denormals": {"test_kernels_flush_as_xla_does"},
    "test_docs_plugins": {"test_ring_allreduce_section", "test_tutorial_end_to_end",
        "test_xla_section",
        "test_check_plugins_engine_xla_in_section_6", "test_serving_inside_xla_section"},
    "test_elementwise": {"test_atan2_is_libms_atan2f_and_atan2", "test_compare_totalorder",
        "test_complex", "test_convert", "test_f32_log_and_log1p_are_xlas_own_bit_for_bit",
        "test_integer_ops", "test_ptx_compiles", "test_unary_float", "test_unary_narrow_float"},
    "test_examples": {"test_example_runs", "test_horovod_example_over_mpi"},
    "test_fused_vectorize": {"test_exp_tanh_max_chain_is_packed",
        "test_multiply_add_chain_is_packed_fma"},
    "test_fusion_split": {"test_complex_inverse_trig_suite_cases_pass",
        "test_multiply_adds_contract_as_in_xlas_fusions"},
    "test_fuzz": {"test_short_fuzz_run_finds_no_crash_or_hang"},
    "test_gather_scatter": {"test_fancy_indexing", "test_gather_clamped_and_unsigned_indices",
        "test_scatter_add_repeated_int_and_bool", "test_scatter_combiners",
        "test_scatter_general_combiner", "test_scatter_index_types_x64",
        "test_scatter_non_commutative_and_variadic_order", "test_variadic_scatter",
        "test_vmapped_gather", "test_vmapped_scatter_batching_dims"},
    "test_grammar": {"test_grammar_builds_in_strict_mode",
        "test_instructions_are_few_coarse_tokens", "test_large_module_builds_no_parse_tree"},
    "test_horovod": {"test_decomposition_runs_the_same_on_xla", "test_kernels_match_decompositions",
        "test_kernels_over_mpi_match_threads"},
    "test_hostile_graph": {"test_deep_call_chain_verifies_without_recursion"},
    "test_hostile_growth": {"test_default_pipeline_work_is_linear"},
    "test_jax_lapack": {"test_failures_give_xla_nans_and_info",
        "test_kernels_compile_for_a_real_gpu", "test_linalg_function_matches_xla",
        "test_lu_rectangular_and_eigh_upper", "test_qr_family_other_targets",
        "test_svd_values_only_both_declared_shapes", "test_triangular_solve_every_flag",
        "test_check_plugins_runs_every_example"},
    "test_jit_cache": {"test_cache_off_or_unwritable_compiles_in_memory",
        "test_second_process_loads_compiled_code"},
    "test_jit_locks": {"test_processes_missing_one_function_at_once_compile_it_once",
        "test_signatures_saved_at_once_all_load_with_their_own_code",
        "test_a_lock_held_elsewhere_is_waited_for_then_taken"},
    "test_linalg": {"test_conv_1d_3d_and_no_spatial", "test_conv_batch_groups",
        "test_conv_feature_groups", "test_conv_integer_narrow_and_complex_types",
        "test_conv_large_matches_xla", "test_conv_nchw", "test_conv_nhwc_and_odd_orders",
        "test_conv_transpose_gradient", "test_dot_f64_and_complex",
        "test_dot_general_batch_and_contracting_orders", "test_dot_int8_to_int32",
        "test_dot_matmul_and_vector_forms", "test_dot_multiple_tiles", "test_dot_narrow_floats",
        "test_dot_pred_and_mixed_operand_types_on_cuda", "test_linalg_kernels_compile_to_ptx"},
    "test_loop_fusion": {"test_fused_programs_match_jax", "test_fused_programs_on_cuda_match_cpu",
        "test_fusion_shrinks_the_thunk_sequence_and_peak_memory",
        "test_small_fma_in_a_while_body_is_xlas_compiled_or_not",
        "test_xla_kloop_fusions_run_as_compiled_loops"},
    "test_multi_device_cli": {"test_a_rank_that_never_comes_ends_within_the_timeout",
        "test_allreduce_module", "test_devices_that_disagree_end_within_the_timeout",
        "test_devices_waiting_elsewhere_are_named_with_their_collective",
        "test_input_of_the_wrong_stacked_shape",
        "test_memory_preflight_counts_every_device_of_a_rank", "test_mismatch_names_the_device",
        "test_rank_0_values_over_mpi_match_threads", "test_rank_count_that_does_not_fit",
        "test_replicas_flag_overrides_the_header", "test_the_transport_counts_each_all_reduce_once",
        "test_two_devices_per_rank_match_threads"},
    "test_parser_fast": {"test_examples_and_xlas_parser_cases_read_the_same_both_ways",
        "test_jax_corpus_and_the_conformance_suite_read_the_same_both_ways",
        "test_mutants_read_the_same_both_ways"},
    "test_parser_xla_forms": {"test_deep_nested_instructions"},
    "test_passes": {"test_default_pipeline_on_jax_corpus"},
    "test_plugins": {"test_check_plugins_cuda_under_simulator",
        "test_check_plugins_on_a_test_plugin", "test_kernel_that_raises_falls_back_unless_strict",
        "test_plugin_path_environment_variable",
        "test_check_plugins_passes_on_bundled_plugins"},
    "test_profile": {"test_profile_on_cuda_adds_up"},
    "test_reduce": {"test_lax_sort_multiple_operands", "test_max_and_avg_pool", "test_maxpool_grad",
        "test_minpool_grad_overlapping", "test_reduce_complex", "test_reduce_general_reducer",
        "test_reduce_tree_path_on_cuda", "test_reduce_window_dilations",
        "test_reduce_window_init_not_identity", "test_reduce_window_variadic",
        "test_select_and_scatter_3d", "test_sort_descending_and_stable_ties", "test_sort_f64_x64",
        "test_sort_general_comparator", "test_sort_mixed_cases", "test_top_k",
        "test_variadic_argmax", "test_variadic_lax_reduce", "test_variadic_reduce_three_operands",
        "test_window_kernels_compile_to_ptx"},
    "test_reduce_fusion": {"test_bf16_reduce_rounds_every_step_as_xla", "test_f64_and_nan_rows",
        "test_lowered_programs_fuse_and_match_xla", "test_more_lowered_programs_fuse_and_match_xla",
        "test_more_xla_optimized_fusions_run_as_row_loops", "test_multi_output_kinput_fusion",
        "test_softmax_is_one_fusion_with_no_full_size_temporary",
        "test_xla_optimized_fusions_run_as_row_loops"},
    "test_rng_fft": {"test_fft_1d", "test_fft_2d_3d", "test_fft_double_precision_x64",
        "test_fft_rng_kernels_compile_to_ptx", "test_fft_small_and_odd_lengths",
        "test_generators_typed_as_on_a_gpu", "test_jax_random_rbg", "test_jax_random_threefry",
        "test_rng_bit_generator_chained_state", "test_rng_bit_generator_optimized_hlo",
        "test_rng_draw_kernels_compile_to_ptx", "test_rng_makes_no_host_copies",
        "test_rng_optimized_hlo_matches_first_xla_run"},
    "test_scalar_jit": {"test_bitcast_and_reduce_precision", "test_complex", "test_convert",
        "test_float_binary", "test_float_unary", "test_fma_contraction_matches_xla", "test_integer",
        "test_total_order_comparator", "test_variadic_reducer_and_nested_call"},
    "test_spmd_fiber_threads": {"test_a_device_stuck_on_another_thread_times_the_wait_out",
        "test_devices_running_at_once_run_fused_loops_serially_with_the_same_bits"},
    "test_startup": {"test_f32_run_imports_no_ml_dtypes_nor_jax_and_loads_stored_tables",
        "test_narrow_types_still_resolve_on_first_use"},
    "test_verifier": {"test_conformance_corruptions_are_caught", "test_jax_corruptions_are_caught",
        "test_jax_program_verifies", "test_jax_programs_cover_the_ops"},
    "test_excess_precision": {"test_xla_flags_in_a_fresh_process_agree",
        "test_bf16_mlp_bit_for_bit_with_xla_either_way"},
    "test_xla_bridge": {"test_reference_on_four_devices",
        "test_reference_table_and_json_on_a_plugin_op",
        "test_without_jax_each_bridge_verb_is_one_line_naming_the_extra"},
    "test_check_plugins_xla": {
        "test_a_wrong_kernel_is_a_mismatch_and_a_raising_one_names_plugin_and_op",
        "test_kernels_in_xla_match_and_what_cannot_be_checked_is_said"},
    "test_cli_messages": {
        "test_check_plugins_prints_a_row_per_op_and_a_summary",
        "test_tables_fold_to_the_width_instead_of_cutting"},
    "test_compile_scaling": {
        "test_default_pipeline_work_is_linear",
        "test_giant_fusion_is_cut_into_pieces_with_the_unsplit_bits",
        "test_long_chain_of_small_adds_compiles_and_runs_as_a_short_one"},
    "test_docs_api": {
        "test_every_block_runs_and_prints_what_it_says"},
    "test_expect_keys": {
        "test_cli_subprocess_exit_code_and_message"},
    "test_ffi_register": {
        "test_overhead_benchmark_runs_every_way_and_agrees_with_jnp"},
    "test_jax_builder": {
        "test_grad_through_built_reduce_dot_and_slices"},
    "test_jax_op": {
        "test_kernel_path_is_an_ffi_call_served_by_the_kernel_its_gradient_the_decompositions"},
    "test_lapack_decomposition_edges": {
        "test_check_plugins_jax_lapack_compares_every_kernel_with_its_decomposition",
        "test_failed_factorizations_give_lapacks_info_and_the_kernels_outputs",
        "test_geqp3_fixed_columns_as_lapack_exchanges_them"},
    "test_lapack_decompositions": {
        "test_eig_decomposes_with_left_and_right_vectors",
        "test_eigh_decomposes_up_to_eigenvector_signs",
        "test_hessenberg_and_tridiagonal_reductions_match_lapacks_representation",
        "test_singular_values_only_and_pinv", "test_svd_decomposes_up_to_singular_vector_phases",
        "test_unique_results_match_jax_in_xlaplug_and_on_xla_cpu"},
    "test_layering": {
        "test_imports_run_one_way", "test_no_import_cycles_between_packages",
        "test_nothing_below_the_cli_prints_or_exits"},
    "test_libm32": {
        "test_compiled_loop_gives_xlas_bits", "test_narrow_floats_every_value",
        "test_f32_sweep_is_xlas_bit_for_bit"},
    "test_mpi_agreement": {
        "test_a_rank_that_fails_before_the_run_is_heard_at_once",
        "test_different_modules_or_options_are_named",
        "test_ranks_that_part_at_a_collective_name_both_sides",
        "test_replicas_that_differ_stop_before_the_communicators_are_split"},
    "test_parser_faults": {
        "test_nested_instructions_at_xlas_limit_run",
        "test_tuple_at_xlas_limit_compiles_and_runs"},
    "test_portable": {
        "test_portable_benchmark_refuses_an_absent_platform"},
    "test_rng_state": {
        "test_devices_in_one_process_keep_their_state_across_calls"},
    "test_startup_imports": {
        "test_cached_code_of_every_runtime_kind_links_without_the_registries",
        "test_lark_reads_only_text_off_the_common_path",
        "test_warm_run_loads_cached_kernels_without_numbas_registries"},
    "test_suite_location": {
        "test_a_clone_without_the_suite_skips_its_tests_naming_the_variable",
        "test_ci_fails_when_the_suite_is_absent"},
}


def _check_slow_names(modules) -> None:
    """A name in SLOW that its module no longer defines is a stale entry: fail loudly."""
    for module in modules:
        name = module.__name__.rpartition(".")[2]
        missing = [f for f in SLOW.get(name, ()) if not hasattr(module, f)]
        if missing:
            raise pytest.UsageError(f"conftest.SLOW names tests {name} does not have: "
                                    f"{sorted(missing)}")


def pytest_collection_modifyitems(config, items):
    _check_slow_names({item.module for item in items})
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        params = getattr(item, "callspec", None)
        if module.startswith("test_cuda_") or (params and params.params.get("device") == "cuda"):
            item.add_marker(pytest.mark.cuda)
        uses_corpus = "jax_corpus" in getattr(item, "fixturenames", ())
        if "jax" in vars(item.module) or uses_corpus:  # jax (or its corpus) is the oracle
            item.add_marker(pytest.mark.jax)
        if module in SUITE_MODULES or uses_corpus:
            item.add_marker(pytest.mark.suite)
        if item.originalname in SLOW.get(module, ()):
            item.add_marker(pytest.mark.slow)
    # Longest files first (file_order.py): the short ones then fill in around the long
    # runs instead of one worker finishing a long file alone at the end.
    import file_order  # (tests/ is on sys.path: see _TESTS above)
    file_order.order(items)
