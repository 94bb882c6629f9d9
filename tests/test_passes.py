"""Golden-text tests for passes (input HLO, expected HLO), and the verifier after every pass."""
from pathlib import Path

import pytest
from golden import all_cases, format_cases, parse_cases, run_case, update_requested

from xlaplug.hlo import parse_module
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.text.printer import module_to_text
from xlaplug.hlo.verifier import verify_module
from xlaplug.passes import DEFAULT_PIPELINE, PassContext, PassManager, resolve_pipeline
from xlaplug.passes.loop_fusion import DEFAULT_MIN_ELEMENTS, LoopFusion
from xlaplug.passes.manager import PassSpecError
from xlaplug.plugin import Plugin, Registry

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


def _names(pipeline):
    return [p.name for p in pipeline]


def test_pipeline_specs():
    assert resolve_pipeline("none") == []
    assert _names(resolve_pipeline(None)) == list(DEFAULT_PIPELINE)
    assert _names(resolve_pipeline("dce, tuple-simplify")) == ["dce", "tuple-simplify"]
    with pytest.raises(HloError, match="unknown pass 'nope'"):
        resolve_pipeline("dce,nope")


def test_builtin_pass_table_names_each_class_by_its_own_name():
    """BUILTIN_PASSES imports a pass class when looked up: its keys are the classes' own
    names, in the default pipeline's order; `in` and a miss import nothing."""
    from xlaplug.passes import BUILTIN_PASSES

    assert list(BUILTIN_PASSES) == list(DEFAULT_PIPELINE) and len(BUILTIN_PASSES) == 10
    assert {name: cls.name for name, cls in BUILTIN_PASSES.items()} == {
        name: name for name in DEFAULT_PIPELINE}
    assert BUILTIN_PASSES["loop-fusion"] is LoopFusion
    assert "dce" in BUILTIN_PASSES and "loop_fusion" not in BUILTIN_PASSES
    assert BUILTIN_PASSES.get("nope") is None
    with pytest.raises(PassSpecError, match="unknown pass 'nope' .*dce, dot-epilogue"):
        resolve_pipeline("nope")


def test_pass_options_are_typed_dataclass_fields():
    """`name{option=value ...}` (as xDSL's pipelines): values read as the fields' types."""
    (fusion,) = resolve_pipeline("loop-fusion{min_elements=1}")
    assert fusion == LoopFusion(min_elements=1)
    assert resolve_pipeline("loop-fusion")[0].min_elements == DEFAULT_MIN_ELEMENTS
    dce, fusion = resolve_pipeline("dce{remove_dead_computations=false}, "
                                   "loop-fusion{min-elements=7}")
    assert dce.remove_dead_computations is False and fusion.min_elements == 7
    (lower,) = resolve_pipeline("custom-call-lowering{decompose_all=true}")
    assert lower.decompose_all is True


@pytest.mark.parametrize("spec, message", [
    ("loop-fusion{min_elemnts=1}",
     "pass 'loop-fusion' has no option 'min_elemnts' (its options: min_elements, max_instructions)"),
    ("loop-fusion{min_elements=many}",
     "pass 'loop-fusion': option 'min_elements' takes an integer, not 'many'"),
    ("dce{remove_dead_computations=maybe}",
     "pass 'dce': option 'remove_dead_computations' takes true or false, not 'maybe'"),
    ("tuple-simplify{x=1}", "pass 'tuple-simplify' has no option 'x' (it takes no options)"),
    ("loop-fusion{min_elements}",
     "pass 'loop-fusion': cannot read option 'min_elements': expected name=value"),
    ("dce,loop-fusion{min_elements=1", "'{' without its closing '}'"),
    ("dce}", "'}' without its '{'"),
])
def test_bad_pass_options_are_one_line_usage_errors(spec, message):
    with pytest.raises(PassSpecError) as e:
        resolve_pipeline(spec)
    assert e.value.message.endswith(message), e.value.message
    assert str(e.value) == f"error: {e.value.message}"  # names no file: not about the text


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mlp.hlo"


def test_dump_dir_writes_each_pass(tmp_path):
    module = parse_module(EXAMPLE.read_text(), str(EXAMPLE))
    pm = PassManager(resolve_pipeline(None), dump_dir=tmp_path)
    pm.run(module, PassContext())
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00-input.hlo"] + [f"{i:02d}-{n}.hlo" for i, n in
                                        enumerate(DEFAULT_PIPELINE, start=1)]
    # Each dump is itself a valid module.
    for p in tmp_path.iterdir():
        verify_module(parse_module(p.read_text(), str(p)))


def test_verifier_runs_after_each_pass_and_names_the_pass():
    class Breaker:
        name = "breaker"

        def run(self, module, ctx):
            root = module.entry.root
            root.shape = root.shape.__class__.array("s32", (7,))
            return True

    module = parse_module("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                          "  ROOT n = f32[2] negate(p)\n}\n")
    with pytest.raises(HloError, match="after pass 'breaker'"):
        PassManager([Breaker()], verify_each=True).run(module, PassContext())


def _registry_with_pass(name, after):
    plugin = Plugin("acme_noop")
    plugin.hlo_pass(name, after=after)(lambda module: False)
    reg = Registry()
    reg.add(plugin)
    return reg


def test_plugin_pass_joins_default_pipeline_after_named_pass():
    """A plugin pass joins the pipeline of the session whose registry holds it, and only
    that one: loading it changes no process-wide table."""
    reg = _registry_with_pass("noop-after-dce", "dce")
    pipe = _names(resolve_pipeline(None, reg))
    assert pipe[pipe.index("dce") + 1] == "noop-after-dce"
    assert _names(resolve_pipeline("noop-after-dce,dce", reg)) == ["noop-after-dce", "dce"]
    assert "noop-after-dce" not in _names(resolve_pipeline(None))
    assert "noop-after-dce" not in _names(resolve_pipeline(None, Registry()))
    with pytest.raises(HloError, match="unknown pass 'noop-after-dce'"):
        resolve_pipeline("noop-after-dce")
    with pytest.raises(HloError, match="pass 'noop-after-dce' takes no options"):
        resolve_pipeline("noop-after-dce{x=1}", reg)


def test_plugin_pass_placement_errors_name_the_plugin():
    with pytest.raises(HloError, match="plugin 'acme_noop': pass 'p' wants to run after "
                       "'nowhere', which is not in the default pipeline"):
        resolve_pipeline(None, _registry_with_pass("p", "nowhere"))
    with pytest.raises(HloError, match="plugin 'acme_noop': pass 'dce' is already registered"):
        resolve_pipeline(None, _registry_with_pass("dce", None))


def test_default_pipeline_on_jax_corpus(jax_corpus):
    """Every corpus module stays valid through every pass, and keeps its entry signature."""
    for entry in jax_corpus:
        for text in (entry.lowered_hlo, entry.compiled_hlo):
            module = parse_module(text)
            before = [str(p.shape) for p in module.entry.parameters], str(module.entry.root.shape)
            # Plugin lowering is tested with plugins; here the core cleanup passes.
            PassManager(resolve_pipeline("inline-calls,tuple-simplify,dce"),
                        verify_each=True).run(module, PassContext())
            after = [str(p.shape) for p in module.entry.parameters], str(module.entry.root.shape)
            assert before == after, entry.name
            assert not any(i.opcode == "call" and not i.attrs.get("is_composite")
                           for c in module.computations for i in c.instructions), entry.name
