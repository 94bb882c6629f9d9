"""Attributes an opcode does not take, and layouts that are not dimension numbers, are parse
errors at their position, as in XLA's parser."""
import pytest

from xlaplug.hlo.text.attr_placement import (ALLOWED, COMMON, misplaced_attribute,
                                              misplaced_names)
from xlaplug.hlo.errors import HloSyntaxError
from xlaplug.hlo.text.parser import parse_module


def _module(body: str) -> str:
    return ("HloModule m\nENTRY main {\n  p = f32[2] parameter(0)\n  " + body + "\n}\n")


@pytest.mark.parametrize("body, col, words", [
    ("ROOT a = f32[2] abs(p), dimensions={0}, to_apply=main", 27,
     "'abs' does not take attribute 'dimensions'"),
    ("ROOT a = f32[2] add(p, p), to_apply=main", 30, "'add' does not take attribute 'to_apply'"),
    ("ROOT a = pred[2] compare(p, p), direction=LT, index=1", 49,
     "'compare' does not take attribute 'index'"),
    ("ROOT a = (f32[2]) tuple(p), dimensions={0}", 31, "no attributes of its own"),
])
def test_attribute_on_an_opcode_that_does_not_take_it(body, col, words):
    with pytest.raises(HloSyntaxError) as e:
        parse_module(_module(body), "t.hlo")
    assert (e.value.line, e.value.column) == (4, col)
    assert words in e.value.message


@pytest.mark.parametrize("body", [
    "ROOT a = f32[2] abs(p), metadata={op_name=\"x\"}, sharding={replicated}",
    "ROOT a = pred[2] compare(p, p), direction=LT, type=TOTALORDER",
    "ROOT a = f32[2] exponential(p), result_accuracy={tolerance={atol=0,rtol=0,ulps=1}}",
    "ROOT a = f32[2] custom-call(p), custom_call_target=\"x\", dimensions={0}",
    "ROOT a = f32[2] abs(p), some_future_attribute=1",
])
def test_attributes_that_belong_or_are_not_checked(body):
    parse_module(_module(body))


def test_every_common_attribute_is_allowed_everywhere():
    for op in ALLOWED:
        for name in COMMON:
            assert misplaced_attribute(op, name) is None


def test_misplaced_names_are_the_names_misplaced_attribute_refuses():
    """The common path's one-set check (misplaced_names) refuses exactly what the per-name
    check does, for every opcode with a fixed set and one without."""
    from xlaplug.hlo.text.attributes import PARSERS
    for op in [*ALLOWED, "custom-call", "fusion", "no-such-op"]:
        names = {*PARSERS, *COMMON, "unknown_attr"}
        assert misplaced_names(op) == {n for n in names if misplaced_attribute(op, n)}, op
    assert "dimensions" in misplaced_names("abs") and not misplaced_names("custom-call")


@pytest.mark.parametrize("layout", ["{-0}", "{+0}", "{0x0}", "{ -0 }"])
def test_signed_or_odd_layout_numbers_are_rejected(layout):
    with pytest.raises(HloSyntaxError, match="malformed layout"):
        parse_module(_module(f"ROOT a = f32[2]{layout} abs(p)"))


def test_plain_layouts_still_parse():
    parse_module(_module("ROOT a = f32[2]{ 0 } abs(p)"))
