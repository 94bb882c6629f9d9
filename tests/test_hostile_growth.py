"""Compile work grows linearly: inline-calls, tuple-simplify, the name uniquer and the
verifier's graph walks, measured by counting operations (Python function calls made, names
probed) at n and 4n -- deterministic, unlike times.  Linear work gives a ratio near 4,
quadratic near 16; the bound 6 leaves room for constant overheads."""
import sys

import pytest

from hostile_programs import (call_chain, doubling_calls, many_calls, many_tuple_gtes,
                              mixed_module)
from xlaplug.hlo.errors import HloError
from xlaplug.hlo.ir import Module
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.rewrite import NameUniquer
from xlaplug.hlo.verifier import verify_module
from xlaplug.passes import PassContext, PassManager, resolve_pipeline

LINEAR_BOUND = 6.0


def _calls_made(fn) -> int:
    """Python-level function calls (including comprehensions and generators) fn makes."""
    count = 0

    def prof(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def _pass_work(text: str, passes: str) -> int:
    module = parse_module(text)
    verify_module(module)
    pm = PassManager(resolve_pipeline(passes))
    return _calls_made(lambda: pm.run(module, PassContext()))


def _verify_work(text: str) -> int:
    module = parse_module(text)
    return _calls_made(lambda: verify_module(module))


@pytest.mark.parametrize("make, passes, n", [
    (many_calls, "inline-calls", 500),
    (many_tuple_gtes, "tuple-simplify", 500),
    (call_chain, "inline-calls", 100),
    (lambda n: call_chain(n, callers_first=False), "inline-calls", 100),
])
def test_pass_work_is_linear(make, passes, n):
    small, large = _pass_work(make(n), passes), _pass_work(make(4 * n), passes)
    assert large / small < LINEAR_BOUND, (small, large)


@pytest.mark.parametrize("make, n", [(many_calls, 500), (call_chain, 100)])
def test_verifier_work_is_linear(make, n):
    small, large = _verify_work(make(n)), _verify_work(make(4 * n))
    assert large / small < LINEAR_BOUND, (small, large)


class _CountingSet(set):
    probes = 0

    def __contains__(self, item):
        _CountingSet.probes += 1
        return super().__contains__(item)


def _uniquer_probes(n: int) -> int:
    uniq = NameUniquer(Module("m"))
    uniq.used = _CountingSet()
    _CountingSet.probes = 0
    names = [uniq("r") for _ in range(n)]
    assert len(set(names)) == n and names[:3] == ["r", "r.1", "r.2"]
    return _CountingSet.probes


def test_name_uniquer_probes_once_per_name():
    small, large = _uniquer_probes(1000), _uniquer_probes(4000)
    assert large / small < LINEAR_BOUND, (small, large)
    assert large <= 2 * 4000 + 1


def test_name_uniquer_skips_names_already_taken():
    module = parse_module("""HloModule m
ENTRY e {
  r = f32[] parameter(0)
  r.1 = f32[] negate(r)
  ROOT r.3 = f32[] negate(r.1)
}
""")
    uniq = NameUniquer(module)
    assert [uniq("r") for _ in range(3)] == ["r.2", "r.4", "r.5"]


def test_inlined_names_do_not_grow_per_level():
    module = parse_module(call_chain(50))
    verify_module(module)
    PassManager(resolve_pipeline("inline-calls")).run(module, PassContext())
    names = [i.name for i in module.entry.instructions]
    assert max(len(n) for n in names) <= len("r.50")
    assert [c.name for c in module.computations] == ["main"]


def test_exponential_inlining_is_refused_before_using_memory():
    module = parse_module(doubling_calls(40))
    verify_module(module)
    with pytest.raises(HloError, match=r"1,099,511,627,777 instructions"):
        PassManager(resolve_pipeline("inline-calls")).run(module, PassContext())


def _compile_work(text: str) -> int:
    """Calls made by parse + verify + the default pipeline + the final verify."""
    def compile_all():
        module = parse_module(text)
        verify_module(module)
        PassManager(resolve_pipeline(None)).run(module, PassContext())
        verify_module(module)
    return _calls_made(compile_all)


@pytest.mark.parametrize("passes", ["loop-fusion", None])
def test_default_pipeline_work_is_linear(passes):
    """A module of calls, tuples, elementwise chains and kLoop fusions (what
    benchmarks/compile_speed.py times at 100,000 instructions): loop-fusion alone, then
    parse, verify and the whole default pipeline."""
    if passes is None:
        small, large = _compile_work(mixed_module(400)), _compile_work(mixed_module(1600))
    else:
        small = _pass_work(mixed_module(400), passes)
        large = _pass_work(mixed_module(1600), passes)
    assert large / small < LINEAR_BOUND, (small, large)
