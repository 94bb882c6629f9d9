"""Golden-text tests for passes (input HLO, expected HLO), and the verifier after every pass."""
from pathlib import Path

import pytest
from golden import all_cases, format_cases, parse_cases, run_case, update_requested

from xlaplug.hlo import parse_module
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.printer import module_to_text
from xlaplug.hlo.verifier import verify_module
from xlaplug.passes import PassManager, resolve_pipeline
from xlaplug.passes.manager import DEFAULT_PIPELINE, register_pass, unregister_pass

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case, tmp_path):
    """One case of tests/golden/: the whole output of its RUN line, exactly (see golden.py)."""
    code, out, err = run_case(case, tmp_path)
    assert code == 0, f"{case.where}: exit {code}: {err}"
    if update_requested():
        cases = parse_cases(case.path)
        cases[case.index].expect = out
        case.path.write_text(format_cases(cases))
        return
    assert out == case.expect, f"{case.where}: output differs from EXPECT"


def test_golden_files_hold_many_cases_and_every_kind():
    """Each kind of golden case is present: passes, the canonical printer, the thunk table."""
    assert all(len(parse_cases(p)) >= 2 for p in {c.path for c in CASES})
    runs = [" ".join(c.args) for c in CASES]
    assert any("--passes none" in r and "--emit" not in r for r in runs)  # parse -> print
    assert any("--emit thunks" in r for r in runs)
    assert any("custom-call-lowering" in r for r in runs)


def test_pipeline_specs():
    assert resolve_pipeline("none") == []
    assert resolve_pipeline(None) == DEFAULT_PIPELINE
    assert resolve_pipeline("dce, tuple-simplify") == ["dce", "tuple-simplify"]
    with pytest.raises(HloError, match="unknown pass 'nope'"):
        resolve_pipeline("dce,nope")


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mlp.hlo"


def test_dump_dir_writes_each_pass(tmp_path):
    module = parse_module(EXAMPLE.read_text(), str(EXAMPLE))
    pm = PassManager(resolve_pipeline(None), dump_dir=tmp_path)
    pm.run(module)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00-input.hlo"] + [f"{i:02d}-{n}.hlo" for i, n in
                                        enumerate(DEFAULT_PIPELINE, start=1)]
    # Each dump is itself a valid module.
    for p in tmp_path.iterdir():
        verify_module(parse_module(p.read_text(), str(p)))


def test_verifier_runs_after_each_pass_and_names_the_pass():
    class Breaker:
        name = "breaker"

        def run(self, module):
            root = module.entry.root
            root.shape = root.shape.__class__.array("s32", (7,))
            return True

    register_pass("breaker", Breaker)
    try:
        module = parse_module("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                              "  ROOT n = f32[2] negate(p)\n}\n")
        with pytest.raises(HloError, match="after pass 'breaker'"):
            PassManager(["breaker"], verify_each=True).run(module)
    finally:
        unregister_pass("breaker")


def test_plugin_pass_joins_default_pipeline_after_named_pass():
    class Noop:
        name = "noop"

        def run(self, module):
            return False

    resolve_pipeline(None)
    register_pass("noop-after-dce", Noop, after="dce")
    try:
        pipe = resolve_pipeline(None)
        assert pipe[pipe.index("dce") + 1] == "noop-after-dce"
    finally:
        unregister_pass("noop-after-dce")
    assert "noop-after-dce" not in resolve_pipeline(None)


def test_default_pipeline_on_jax_corpus(jax_corpus):
    """Every corpus module stays valid through every pass, and keeps its entry signature."""
    for entry in jax_corpus:
        for text in (entry.lowered_hlo, entry.compiled_hlo):
            module = parse_module(text)
            before = [str(p.shape) for p in module.entry.parameters], str(module.entry.root.shape)
            # Plugin lowering is tested with plugins; here the core cleanup passes.
            PassManager(resolve_pipeline("inline-calls,tuple-simplify,dce"),
                        verify_each=True).run(module)
            after = [str(p.shape) for p in module.entry.parameters], str(module.entry.root.shape)
            assert before == after, entry.name
            assert not any(i.opcode == "call" and not i.attrs.get("is_composite")
                           for c in module.computations for i in c.instructions), entry.name
