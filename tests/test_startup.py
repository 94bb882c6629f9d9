"""Start-up: what a new process imports and builds before it runs a module.

Counted, not timed: which slow modules a run of an f32 module imports (ml_dtypes costs
0.5-0.8 s of CPU to import, jax far more), and that the parser comes from the stored tables.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MLP_PATH = ROOT / "examples" / "mlp.hlo"

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


def test_a_paused_block_hands_what_it_made_to_the_oldest_generation():
    """After cyclic_gc_paused the module's objects sit in the oldest generation, the young
    one empty, the collector on again; objects someone else froze stay frozen."""
    import gc

    from xlaplug.passes.manager import cyclic_gc_paused

    assert gc.isenabled() and gc.get_freeze_count() == 0
    with cyclic_gc_paused():
        assert not gc.isenabled()
        made = [[k] for k in range(2000)]  # more than a young generation's threshold
    assert gc.isenabled()
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(made) in oldest and all(id(x) in oldest for x in made)
    assert gc.get_count()[0] < 10  # the young generation starts over
    gc.disable()  # a caller's own pause is left as it was: nothing moves
    try:
        with cyclic_gc_paused():
            young = [[k] for k in range(10)]
        assert not gc.isenabled() and id(young) in {id(o) for o in gc.get_objects(generation=0)}
    finally:
        gc.enable()
    mine = [[1]]
    gc.freeze()  # someone else's frozen objects
    try:
        frozen = gc.get_freeze_count()
        with cyclic_gc_paused():
            later = [[2]]
        assert gc.get_freeze_count() == frozen  # not thawed ...
        assert id(mine) not in {id(o) for o in gc.get_objects()}  # ... still out of reach
        assert id(later) not in {id(o) for o in gc.get_objects(generation=2)}  # not moved
    finally:
        gc.unfreeze()


EXIT_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("atexit, frozen:", gc.get_freeze_count() > 0, file=sys.stderr))
sys.argv = ["xlaplug"] + {args!r}
import runpy
runpy.run_module("xlaplug", run_name="__main__")
"""


def test_the_program_ends_as_the_command_says_with_the_collector_frozen(tmp_path):
    """`python -m xlaplug` (the console script's `program`): the command's exit status and
    output, atexit handlers run -- after everything was frozen out of the collector's way."""
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT r = f32[2] "
                   "add(p p)\n}\n")
    out = tmp_path / "out.hlo"
    for args, code in ((["compile", "--passes", "none", str(MLP_PATH), "-o", str(out)], 0),
                       (["compile", str(bad)], 2)):
        proc = subprocess.run([sys.executable, "-c", EXIT_PROBE.format(args=args)],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert proc.returncode == code, proc.stderr
        assert proc.stderr.splitlines()[-1] == "atexit, frozen: True"
        if code == 2:
            assert proc.stderr.startswith(f"{bad}:4:") and "Traceback" not in proc.stderr
    assert "ENTRY main.3" in out.read_text()
