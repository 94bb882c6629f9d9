"""Thunk sequences, buffer assignment, and the executor's handling of structure."""

import jax
import jax.numpy as jnp
import numpy as np

from xlaplug.runtime.executor import run_module
from xlaplug.runtime.thunks import build_thunks, thunks_json
from xlaplug.hlo import parse_module

ASYNC = """HloModule m
wrapped {
  a = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(a)
}
ENTRY e {
  p = f32[4]{0} parameter(0)
  s = ((f32[4]{0}), f32[4]{0}, s32[]) async-start(p), calls=wrapped
  u = ((f32[4]{0}), f32[4]{0}, s32[]) async-update(s)
  ROOT d = f32[4]{0} async-done(u)
}
"""


def test_async_wrappers_run_the_wrapped_computation():
    x = np.linspace(-2, 2, 4, dtype=np.float32)
    got = run_module(parse_module(ASYNC), [x])
    np.testing.assert_array_equal(got, np.asarray(jax.jit(jnp.negative)(x)))


def test_buffers_are_reused_and_peak_is_below_the_sum():
    def chain(x):
        for _ in range(6):
            x = jnp.tanh(x) * 2.0 + 1.0
        return x
    text = jax.jit(chain).lower(np.ones((64, 64), np.float32)).as_text(dialect="hlo")
    seq = build_thunks(parse_module(text))
    total = sum(t.nbytes for t in seq.thunks)
    assert seq.peak_bytes < total / 3, (seq.peak_bytes, total)
    assert len(seq.slot_sizes) < len([t for t in seq.thunks if t.slot is not None])
    # A freed slot is only reused after the value in it is dead.
    js = thunks_json(seq)
    live_in_slot = {}
    for t in js["thunks"]:
        if t["buffer"] is not None:
            holder = live_in_slot.get(t["buffer"])
            assert holder is None or holder in _all_freed_before(js, t["index"]), t
            live_in_slot[t["buffer"]] = t["index"]


def _all_freed_before(js, index):
    return {d for t in js["thunks"][:index] for d in t["frees"]}


def test_while_and_conditional_hold_nested_sequences():
    def f(x, i):
        y = jax.lax.fori_loop(0, 5, lambda k, c: c * 1.5, x)
        return jax.lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], y)
    x = np.float32([0.1, 0.2])
    text = jax.jit(f).lower(x, np.int32(1)).as_text(dialect="hlo")
    seq = build_thunks(parse_module(text))
    kinds = {t.kind: t for t in seq.thunks}
    assert len(kinds["while"].nested) == 2 and len(kinds["conditional"].nested) == 3
    for i in (0, 1, 2, 7, -3):  # out-of-range indices: XLA runs the last branch; jax clamps
        got = run_module(parse_module(text), [x, np.int32(i)])
        want = np.asarray(jax.jit(f)(x, np.int32(i)))
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_side_effecting_instruction_after_root_runs():
    from suite_location import conformance_dir
    text = (conformance_dir() / "add_any_float32_2_float32_2.hlo").read_text()
    # Alter the expected value: the check after ROOT must run and fail.
    from xlaplug.runtime.conformance import CheckFailure, suite_session
    from xlaplug.runtime.driver import compile_module
    from xlaplug.runtime.runner import execute
    import re
    bad, n = re.subn(r"(ROOT constant\.5 = f32\[2\]\{0\} constant\()\{[^}]*\}", r"\1{1e9, 0}", text)
    assert n == 1
    session = suite_session()
    m = parse_module(text)
    compile_module(m, session)
    execute(m, [], session)
    m2 = parse_module(bad)
    compile_module(m2, session)
    import pytest
    with pytest.raises(CheckFailure):
        execute(m2, [], session)
