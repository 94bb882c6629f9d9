"""`xlaplug list-opcodes` and the coverage it reports: every core opcode has a shape rule and
a kernel on both devices, or is in backends/coverage.py's list of what is not supported,
with the reason.

The table's whole output is tests/cli_output/list_opcodes.txt; after moving a kernel or
adding an opcode, regenerate it with
`python -m xlaplug.cli list-opcodes --no-plugins > tests/cli_output/list_opcodes.txt`.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from xlaplug.backends.common.fusion_contents import LOOP_OPS
from xlaplug.backends.common.scalar_ops import SCALAR_OPS
from xlaplug.backends.coverage import BY_EXECUTOR, NOT_SUPPORTED
from xlaplug.backends.registry import lookup
from xlaplug.cli.main import main
from xlaplug.hlo.opcodes import ALL_OPCODES
from xlaplug.hlo.shape_rules import RULES

GOLDEN = Path(__file__).parent / "cli_output" / "list_opcodes.txt"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_every_core_opcode_has_a_rule_and_kernels_or_a_reason():
    assert set(NOT_SUPPORTED) <= ALL_OPCODES and set(BY_EXECUTOR) <= ALL_OPCODES
    for op in sorted(ALL_OPCODES):
        assert op in RULES, f"{op}: no shape rule"
        kernels = {d: lookup(op, d) for d in ("cpu", "cuda")}
        if op in NOT_SUPPORTED:
            assert NOT_SUPPORTED[op].strip(), f"{op}: listed as not supported with no reason"
            assert kernels == {"cpu": None, "cuda": None}, \
                f"{op} has a kernel now: take it off backends/coverage.NOT_SUPPORTED"
        elif op not in BY_EXECUTOR:
            missing = [d for d, fn in kernels.items() if fn is None]
            assert not missing, f"{op}: no kernel on {missing} and not in NOT_SUPPORTED"


def test_what_loop_fusion_takes_has_a_scalar_form():
    # copy is the identity in generated scalar code; an unsupported opcode runs nowhere
    missing = LOOP_OPS - set(SCALAR_OPS) - {"copy"} - set(NOT_SUPPORTED)
    assert not missing, sorted(missing)


def test_json_lists_every_opcode_with_its_homes():
    r = cli("list-opcodes", "--json", "--no-plugins")
    assert r.exit_code == 0, r.output
    rows = {row["opcode"]: row for row in json.loads(r.output)["opcodes"]}
    assert set(rows) == ALL_OPCODES
    assert rows["exponential"] == {
        "opcode": "exponential",
        "shape_rule": "hlo/shape_rules/elementwise.py:_unary",
        "kernels": {"cpu": "backends/cpu/elementwise_math.py:_float_unary",
                    "cuda": "backends/cuda/elementwise.py:_elementwise"},
        "scalar": "backends/common/scalar_ops_unary.py:_unary_float",
        "scalar_cuda": None,
        "loop_fusion": "yes",
        "overridden_by": [],
        "not_supported": None,
    }
    assert rows["tuple"]["kernels"] == {"cpu": "backends/common/structural.py:_tuple",
                                        "cuda": "backends/common/structural.py:_tuple"}
    assert rows["constant"]["kernels"]["cuda"] == "backends/executor.py:_constant_kernel"
    assert rows["constant"]["loop_fusion"] == "rank 0"
    assert rows["bitcast"]["scalar_cuda"] == "backends/cuda/scalar_cuda.py:_scalar_bitcast"
    assert rows["scan"]["not_supported"] == NOT_SUPPORTED["scan"]
    assert rows["scan"]["kernels"] == {"cpu": None, "cuda": None}


def test_json_names_plugins_that_override_an_opcode(tmp_path):
    d = tmp_path / "plugins"
    d.mkdir()
    (d / "neg.py").write_text(textwrap.dedent("""\
        from xlaplug.plugin import Plugin
        plugin = Plugin("negp")

        @plugin.kernel("negate", device="cpu")
        def negate(x, out):
            out[...] = -x
        """))
    r = cli("list-opcodes", "--json", "--plugins-dir", d)
    assert r.exit_code == 0, r.output
    rows = {row["opcode"]: row for row in json.loads(r.output)["opcodes"]}
    assert rows["negate"]["overridden_by"] == ["negp (cpu)"]
    r = cli("list-opcodes", "--plugins-dir", d)
    line = next(ln for ln in r.output.splitlines() if ln.startswith("negate "))
    assert line.split() == ["negate", "ew", "ew_math", "ew", "yes", "yes", "negp"]


def test_table_fits_80_columns_and_is_the_golden_output():
    r = cli("list-opcodes", "--no-plugins")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert [ln.rstrip() for ln in lines] == GOLDEN.read_text().splitlines()
