"""The rank's program `--engine xla` gives XLA under mpiexec (xla/mpi_rewrite.py,
mpi_order.py): every collective an `xlaplug.mpi.*` typed-FFI call, chained by a u32[] token
that goes through control flow as data; what it cannot order is a one-line error.  No MPI
here: the rewrite alone (tests/test_engine_xla_mpi.py runs it under mpiexec)."""
from __future__ import annotations

import pytest

from xlaplug.backends.spmd.groups import DeviceGrid
from xlaplug.backends.spmd.place import Place
from xlaplug.cli.common import setup_plugins
from xlaplug.xla.engine import EngineError, lowered
from xlaplug.xla.mpi_rewrite import rewrite_for_mpi

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""
ASYNC = "HloModule async, replica_count=2\n" + ADD + """
ENTRY e {
  x = f32[4] parameter(0)
  ars = f32[4] all-reduce-start(x), replica_groups={}, to_apply=add
  ard = f32[4] all-reduce-done(ars)
  ags = (f32[4], f32[8]) all-gather-start(x), dimensions={0}, replica_groups={}
  agd = f32[8] all-gather-done(ags)
  cps = (f32[4], f32[4], u32[], u32[]) collective-permute-start(x), source_target_pairs={{0,1},{1,0}}
  cpd = f32[4] collective-permute-done(cps)
  ROOT t = (f32[4], f32[8], f32[4]) tuple(ard, agd, cpd)
}
"""
IN_A_MAP = "HloModule mapped, replica_count=2\n" + ADD + """
reduced {
  a = f32[] parameter(0)
  ROOT r = f32[] all-reduce(a), replica_groups={}, to_apply=add
}

ENTRY e {
  x = f32[4] parameter(0)
  ROOT m = f32[4] map(x), dimensions={0}, to_apply=reduced
}
"""


def _rewritten(text: str, device: int = 1):
    registry = setup_plugins((), False, False, "cpu", "kernel").registry
    module = lowered(text, registry, communicators=True)
    served = rewrite_for_mpi(module, Place(DeviceGrid(2, 1), device), registry, 3)
    return module, served


def test_async_forms_become_chained_calls():
    module, served = _rewritten(ASYNC)
    entry = module.entry.instructions
    assert not [i for i in entry if i.opcode.endswith(("-start", "-done"))]
    calls = [i for i in entry if i.opcode == "custom-call"]
    assert [c.attrs["custom_call_target"] for c in calls] == [
        "xlaplug.mpi.all_reduce", "xlaplug.mpi.all_gather", "xlaplug.mpi.collective_permute"]
    assert [s.opcode for s in served] == ["all-reduce-start", "all-gather-start",
                                          "collective-permute-start"]
    for k, c in enumerate(calls):
        assert c.attrs["custom_call_has_side_effect"] is True
        assert str(c.attrs["backend_config"]).startswith(f"{{run = 3 : i64, index = {k} : i64")
        token = c.operands[-1]  # the previous call's last result, or the entry's constant
        if k == 0:
            assert token.opcode == "constant"
        else:
            assert token.opcode == "get-tuple-element" and token.operands[0] is calls[k - 1]
            assert token.attrs["index"] == len(calls[k - 1].shape.tuple_shapes) - 1


def test_replica_id_is_the_rank_s_constant():
    module, _ = _rewritten("HloModule ids, replica_count=2\nENTRY e {\n"
                           "  ROOT id = u32[] replica-id()\n}\n", device=1)
    root = module.entry.root
    assert root.opcode == "constant" and int(root.literal) == 1


def test_a_collective_in_a_map_is_a_one_line_error():
    with pytest.raises(EngineError) as e:
        _rewritten(IN_A_MAP)
    assert "map 'm' calls 'reduced', which holds collectives" in e.value.message
    assert "\n" not in e.value.message


def test_overrides_taking_a_communicator_are_ordered_calls_the_others_override_calls():
    """A core opcode whose override takes a communicator joins the chain of ordered calls
    (xlaplug.mpi.kernel); one whose override does not is left to override_rewrite.py
    (an xlaplug.override call, no token); a reducer's keeps XLA's op."""
    import copy
    pytest.importorskip("jax")  # (bind_overrides registers the override target with jax)

    from xlaplug.plugin import Plugin
    from xlaplug.xla.mpi_rewrite import twins
    from xlaplug.xla.override_rewrite import bind_overrides
    p = Plugin("ovr_order")

    @p.kernel("negate", communicator=True)
    def negate(x, out, *, comm):
        out[...] = -x

    @p.kernel("abs")
    def absolute(x, out):
        out[...] = abs(x)
    registry = setup_plugins((p,), False, False, "cpu", "kernel").registry
    text = "HloModule o, replica_count=2\n" + ADD.replace("ROOT s = f32[] add(a, b)", (
        "nb = f32[] negate(b)\n  ROOT s = f32[] add(a, nb)")) + """
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ab = f32[4] abs(n)
  r = f32[4] all-reduce(ab), replica_groups={}, to_apply=add
  ROOT m = f32[4] abs(r)
}
"""
    module = lowered(text, registry, communicators=True)
    ours = copy.deepcopy(module)
    twin = twins(ours, module)
    served = rewrite_for_mpi(ours, Place(DeviceGrid(2, 1), 0), registry, 3)
    assert [s.opcode for s in served] == ["negate", "all-reduce"]
    handler, key = bind_overrides(ours, registry, None, lambda i: twin.get(id(i)))
    try:
        binding = handler.runs[key]
        assert [(i.name, i.opcode) for i in binding.instructions] == [("ab", "abs"),
                                                                       ("m", "abs")]
        assert binding.instructions[0] is module.entry.instructions[2]  # the original
    finally:
        handler.unbind(key)
    targets = [i.attrs["custom_call_target"] for i in ours.entry.instructions
               if i.opcode == "custom-call"]
    assert targets == ["xlaplug.mpi.kernel", "xlaplug.override", "xlaplug.mpi.all_reduce",
                       "xlaplug.override"]
    assert "negate" in [i.opcode for i in ours.computation("add").instructions]
