"""HLO -> StableHLO -> HLO through jaxlib (xlaplug/xla/source.py) runs to the same outputs:
a sample of the jax corpus (its recorded inputs; the outputs of the original module and of
the round-tripped one compared bit for bit) and StableHLO suite cases (their checks still
pass after the round trip)."""
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax_corpus  # noqa: E402
from suite_location import conformance_dir  # noqa: E402

from xlaplug.runtime.driver import compile_module# noqa: E402
from xlaplug.hlo.text.parser import parse_module  # noqa: E402
from xlaplug.hlo.text.printer import module_to_text  # noqa: E402
from xlaplug.plugin import Session, load_plugins  # noqa: E402
from xlaplug.runtime.runner import execute# noqa: E402
from xlaplug.xla.jaxlib_names import mlir_to_hlo_text  # noqa: E402
from xlaplug.xla.source import to_stablehlo  # noqa: E402

# Control flow, sorting, scatter, fft, integer and narrow types, complex, a LAPACK custom
# call (jax_lapack's kernel on both sides), pytrees of outputs.
CORPUS = ["mlp", "scan_rnn", "while_collatz", "switch_index", "sort_multi_operand",
          "scatter_at_ops", "fft_ifft", "int_ops_u8", "bf16_math", "complex_arith",
          "cholesky", "pytree_outputs"]
SUITE = ["add_float32_20_20_float32_20_20", "cumsum_float32_8_9", "cumsum_int8_8_9",
         "conv_general_dilated_float32_2_3_9_10_float32_3_3_4_5"]


def round_trip(text: str) -> str:
    return mlir_to_hlo_text(to_stablehlo(module_to_text(parse_module(text))), "test")


def run(text: str, inputs, session):
    module = parse_module(text)
    compile_module(module, session)
    return execute(module, list(inputs), session).outputs


@pytest.fixture(scope="module")
def session():
    return Session(load_plugins(entry_points=False))


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_program_round_trips(name, session):
    entry = jax_corpus.load_entry(name)
    with jax.enable_x64(entry.x64):
        back = round_trip(entry.lowered_hlo)
    before = run(entry.lowered_hlo, entry.inputs, session)
    after = run(back, entry.inputs, session)
    assert len(before) == len(after)
    for k, (a, b) in enumerate(zip(before, after)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        np.testing.assert_array_equal(a.view(f"u{a.dtype.itemsize}") if a.dtype.kind != "b"
                                      else a, b.view(f"u{b.dtype.itemsize}")
                                      if b.dtype.kind != "b" else b, err_msg=f"out{k}")


@pytest.mark.parametrize("name", SUITE)
def test_suite_case_round_trips_and_its_checks_pass(name, tmp_path):
    from xlaplug.runtime.conformance import run_case
    suite = conformance_dir()
    path = suite / f"{name}.hlo"
    back = round_trip(path.read_text())
    assert 'custom_call_target="check.' in back  # the checks survive the trip
    out = Path(tmp_path / f"{name}.hlo")
    out.write_text(back)
    result = run_case(out)
    assert result.status == "pass", result.detail
