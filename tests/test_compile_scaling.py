"""Compile work linear in the module (scripts/compile_scaling.py times it): loop-fusion's
group walks over a long chain of small adds, buffer assignment over a wide fan-out, and a
fusion too large to compile quickly cut into pieces that give the unsplit loop's bits.
Work is counted (Python calls made, as tests/test_hostile_growth.py counts it) at n and 4n:
linear work gives a ratio near 4, quadratic near 16.  No timing."""
import sys
from pathlib import Path

import numpy as np
import pytest

from test_hostile_growth import LINEAR_BOUND, _calls_made
from xlaplug.backends.cpu.region_code import is_region
from xlaplug.hlo.text.parser import parse_module
from xlaplug.passes import PassContext, PassManager, resolve_pipeline
from xlaplug.runtime.driver import compile_module
from xlaplug.runtime.runner import execute
from xlaplug.runtime.thunks import build_sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import compile_scaling as shapes  # noqa: E402


def _pipeline_work(text: str) -> int:
    module = parse_module(text)
    pm = PassManager(resolve_pipeline(None))
    return _calls_made(lambda: pm.run(module, PassContext()))


@pytest.mark.parametrize("shape", ["chain", "chain_call", "fma_chain", "fanout",
                                   "call_depth", "while_body"])
def test_default_pipeline_work_is_linear(shape):
    make = shapes.SHAPES[shape]
    small, large = _pipeline_work(make(400)), _pipeline_work(make(1600))
    assert large / small < LINEAR_BOUND, (small, large)


def test_buffer_assignment_work_is_linear():
    def work(n):
        module = parse_module(shapes.fanout(n))
        return _calls_made(lambda: build_sequence(module.entry, lambda ins: None))
    small, large = work(2000), work(8000)
    assert large / small < LINEAR_BOUND, (small, large)


def test_buffer_assignment_reuses_the_smallest_oldest_dead_buffer():
    """Best fit, ties to the buffer freed first: f32[8] values reuse the two f32[8] slots in
    turn, and the f32[16] value gets a new slot rather than none."""
    text = """HloModule m
ENTRY main {
  x = f32[8] parameter(0)
  a = f32[8] negate(x)
  b = f32[8] negate(a)
  c = f32[8] negate(b)
  d = f32[8] negate(c)
  w = f32[16] concatenate(d, d), dimensions={0}
  ROOT r = f32[16] negate(w)
}
"""
    seq = build_sequence(parse_module(text).entry, lambda ins: None)
    slots = {t.ins.name: t.slot for t in seq.thunks}
    assert seq.slot_sizes == [32, 32, 64, 64]
    assert [slots[k] for k in "abcd"] == [0, 1, 0, 1]
    assert (slots["w"], slots["r"]) == (2, 3)


def _fusions(module):
    return [i for i in module.entry.instructions if i.opcode == "fusion"]


def test_long_chain_of_small_adds_compiles_and_runs_as_a_short_one():
    """20,000 dependent adds: no loop fusion (no FMA on f32[8]; small regions of the adds,
    run interpreted until hot), and the bits a chain of 200 adds gives run 100 times over
    (the same f32 additions in the same order)."""
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    y = np.float32(1 / 3) * np.arange(1, 9, dtype=np.float32)
    m = parse_module(shapes.chain(20_000))
    compile_module(m, None)
    assert not [f for f in _fusions(m) if not is_region(f)]
    (got,) = execute(m, [x, y]).outputs
    small = parse_module(shapes.chain(200))
    compile_module(small, None)
    z = x
    for _ in range(100):
        (out,) = execute(small, [z, y]).outputs
        z = -out  # both modules' roots negate the chain's last value
    np.testing.assert_array_equal(got.view(np.uint32), (-z).view(np.uint32))


def test_giant_fusion_is_cut_into_pieces_with_the_unsplit_bits():
    """A chain of 150 multiply-adds on f32[8] (one fusion, for XLA's FMAs) cut at 16
    instructions: every piece at most 16 plus what stays with its reader, and the output
    bit for bit the unsplit loop's."""
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(8).astype(np.float32) * s for s in (1.0, 0.9, 0.5)]
    outs = []
    for limit in (16, 10_000):
        m = parse_module(shapes.fma_chain(300))
        compile_module(m, None, options={"loop-fusion": {"max_instructions": limit},
                                         "small-regions": {"enabled": False}})
        fusions = _fusions(m)
        sizes = [len([i for i in f.attrs["calls"][0].instructions
                      if i.opcode != "parameter"]) for f in fusions]
        if limit == 16:
            assert len(fusions) > 10 and max(sizes) <= 17, sizes
        else:
            assert len(fusions) == 1
        outs.append(execute(m, args).outputs[0])
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
