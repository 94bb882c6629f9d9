"""The execution context declares every field it has (issue 21, item 4) and the custom calls
the runtime runs itself are kernels in its own table (item 3), not cases in the executor."""
from __future__ import annotations

import numpy as np
import pytest

import xlaplug
from xlaplug.hlo import parse_module
from xlaplug.hlo.opcodes import RUNTIME_CUSTOM_CALLS, SHARD_MAP_TARGET
from xlaplug.runtime.executor import ExecContext
from xlaplug.runtime.options import RunOptions
from xlaplug.runtime.runtime_kernels import RuntimeKernels, runtime_kernels

ONE = """HloModule one
ENTRY main {
  a = f32[4] parameter(0)
  c = f32[] constant(2)
  b = f32[4] broadcast(c), dimensions={}
  ROOT m = f32[4] multiply(a, b)
}"""

TWO = """HloModule two, replica_count=2
sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY main {
  a = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(a), replica_groups={{0,1}}, to_apply=sum
}"""


def test_a_context_takes_no_field_it_does_not_declare():
    ctx = ExecContext("cpu", {})
    with pytest.raises(AttributeError):
        ctx.spmd_place = None  # a misspelt or new field: refused, not silently added
    assert not hasattr(ctx, "__dict__")


def test_runs_leave_no_per_run_state_on_the_kept_contexts():
    x = np.arange(4, dtype=np.float32)
    one = xlaplug.compile(ONE)
    np.testing.assert_array_equal(one(x)[0], 2 * x)
    ctx = one.prepared(RunOptions()).ctx
    (y,) = one(x)
    assert one.prepared(RunOptions()).ctx is ctx  # kept: made once, for every call
    assert ctx.profiler is None and ctx.spmd is None
    one.run(x, profile=True)
    assert ctx.profiler is None
    two = xlaplug.compile(TWO)
    (r,) = two(np.stack([x, x + 1]))
    np.testing.assert_array_equal(r, np.stack([2 * x + 1] * 2))
    contexts = two.contexts.for_options(RunOptions())
    kept = [contexts(d) for d in range(2)]
    two(np.stack([x, x]))
    assert [contexts(d) for d in range(2)] == kept
    assert all(c.spmd is None and c.profiler is None for c in kept)


def test_every_runtime_custom_call_has_a_runtime_kernel():
    assert runtime_kernels().targets() == RUNTIME_CUSTOM_CALLS
    table = RuntimeKernels()
    with pytest.raises(ValueError, match="not a custom call xlaplug makes for itself"):
        table.register("MyPluginOp", lambda ins, args, ctx: None)
    table.register(SHARD_MAP_TARGET, lambda ins, args, ctx: None)
    with pytest.raises(ValueError, match="registered twice"):
        table.register(SHARD_MAP_TARGET, lambda ins, args, ctx: None)


def test_the_context_runs_a_runtime_custom_call_from_its_table():
    module = parse_module(f"""HloModule m
body {{
  p = f32[4] parameter(0)
  ROOT n = f32[4] negate(p)
}}
ENTRY main {{
  a = f32[4] parameter(0)
  ROOT s = f32[4] custom-call(a), custom_call_target="{SHARD_MAP_TARGET}", called_computations={{body}}
}}""")
    seen = []

    def region(ins, args, ctx):  # the table's kernel, not a case in the executor
        seen.append(ins.name)
        return ctx.run(ins.attrs["called_computations"][0], list(args))
    table = RuntimeKernels()
    table.register(SHARD_MAP_TARGET, region)
    x = np.arange(4, dtype=np.float32)
    out = ExecContext("cpu", {}, runtime=table).run(module.entry, [x])
    np.testing.assert_array_equal(out, -x)
    assert seen == ["s"]
    # Without a runtime kernel for it, the target is a plugin's that no plugin provides.
    empty = ExecContext("cpu", {}, runtime=RuntimeKernels())
    with pytest.raises(Exception, match=f"no plugin provides target '{SHARD_MAP_TARGET}'"):
        empty.run(module.entry, [x])


LOOP = """HloModule loop2, replica_count=2
sum {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
cond {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4] get-tuple-element(s), index=1
  r = f32[4] all-reduce(v), replica_groups={{0,1}}, to_apply=sum
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[4]) tuple(i1, r)
}
ENTRY main {
  z = s32[] constant(0)
  a = f32[4] parameter(0)
  init = (s32[], f32[4]) tuple(z, a)
  w = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT out = f32[4] get-tuple-element(w), index=1
}"""


def test_a_failed_multi_device_call_leaves_the_executable_usable():
    exe = xlaplug.compile(LOOP)
    x = np.ones(4, np.float32)
    with pytest.raises(xlaplug.HloError, match="while"):
        exe.run(x, max_while_iterations=1)
    (y,) = exe(x)  # the kept device threads were replaced: the next call runs
    np.testing.assert_array_equal(y, np.full((2, 4), 8, np.float32))
