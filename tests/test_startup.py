"""Start-up: what a new process imports and builds before it runs a module.

Counted, not timed: which slow modules a run of an f32 module imports (ml_dtypes costs
0.5-0.8 s of CPU to import, jax far more), and that the parser comes from the stored tables.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import sys
from click.testing import CliRunner
from xlaplug.cli.main import main
r = CliRunner().invoke(main, ["run", "examples/mlp.hlo"])
assert r.exit_code == 0, r.output
from xlaplug.hlo.text.parser import _lark
print(sorted(m for m in ("ml_dtypes", "jax") if m in sys.modules))
print(_lark().source_path)
"""


def test_f32_run_imports_no_ml_dtypes_nor_jax_and_loads_stored_tables():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-2] == "[]"
    assert lines[-1] == "<deserialized>"


def test_narrow_types_still_resolve_on_first_use():
    probe = ("import sys\nfrom xlaplug.hlo import dtypes as D\n"
             "assert 'ml_dtypes' not in sys.modules\n"
             "assert 'bf16' in D.ELEMENT_DTYPES and D.bit_width('f8e4m3fn') == 8\n"
             "assert 'ml_dtypes' not in sys.modules\n"
             "dt = D.to_dtype('bf16')\n"
             "assert D.from_dtype(dt) == 'bf16' and dt in D._DTYPE_TO_ELEMENT\n"
             "print(len(D.ELEMENT_DTYPES), dt.itemsize)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["30", "2"]
