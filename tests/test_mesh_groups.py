"""Replica groups written as mesh axes: parse, print back as read, and the errors of XLA's
parser tests (xla/hlo/parser/hlo_parser_test.cc: MeshReplicaGroup*)."""
from __future__ import annotations

import pytest

from xlaplug.hlo.errors import HloError
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.text.printer import module_to_text

_MODULE = """HloModule m, replica_count=8

add {{
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT a = f32[] add(lhs, rhs)
}}

ENTRY e {{
  p = f32[4]{{0}} parameter(0)
  ROOT ar = f32[4]{{0}} all-reduce(p), replica_groups={groups}, to_apply=add
}}
"""

ROUND_TRIP = [
    "mesh['axis_0'=2,'axis_1'=4] {'axis_1'}",
    "mesh['x'=2,'y'=4] {'y':(2)2}",
    "mesh['x'=2,'y'=4] {'y','x'}",
    "mesh['a'=2,'b'=4], device_ids=([4,2]T(1,0)) {'a'}",
    "mesh['x'=2,'y'=2,'z'=2], device_ids=(0,2,1,3,4,6,5,7) {'y'}",
    "mesh['a'=8] {'a':(1)2,'a':(4)2}",
]


@pytest.mark.parametrize("groups", ROUND_TRIP)
def test_prints_back_as_read(groups):
    text = _MODULE.format(groups=groups)
    printed = module_to_text(parse_module(text))
    assert f"replica_groups={groups}," in printed
    assert module_to_text(parse_module(printed)) == printed


@pytest.mark.parametrize("groups,message", [
    ("mesh['axis_0'=2,'axis_1'=2] {'bogus'}", "is not a valid axis name or index"),
    ("mesh['axis_0'=2,'axis_1'=2] {'5'}", "out of bounds for mesh"),
    ("mesh['axis_0'=2,'axis_1'=2, device_ids=(0,1,2)] {'axis_0'}", "device_ids"),
    ("mesh['x'=4] {'x':(1)4}", "does not fit axis size"),
    ("mesh['x'=2,'x'=2] {'x'}", "duplicate axis names"),
])
def test_errors(groups, message):
    with pytest.raises(HloError, match=message) as e:
        parse_module(_MODULE.format(groups=groups), "m.hlo")
    assert str(e.value).startswith("m.hlo:11:")
