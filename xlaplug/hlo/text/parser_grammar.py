"""The lark grammar text (hlo.lark) and the regular expressions spliced into it: strings,
nested braces, and the `, name=value` attribute run of an instruction; and the expressions
parser_fast reads a whole instruction line with, made of the grammar's terminals."""
from __future__ import annotations

import re
from pathlib import Path

# A string never spans lines (XLA prints strings C-escaped), so an unterminated one is
# reported on its own line instead of swallowing the rest of the file.
_STR = r'"(?:[^"\\\n]|\\.)*"'


def _braced(depth: int) -> str:
    inner = r"[^{}\"]|" + _STR
    rx = r"\{(?:" + inner + r")*\}"
    for _ in range(depth - 1):
        rx = r"\{(?:" + inner + "|" + rx + r")*\}"
    return rx


BRACE_DEPTH = 8
# One attribute value: brace groups, strings, [..] and (..) groups (one level of parens
# nests: a mesh's `device_ids=([4,2]T(1,0))`), plain characters, and
# a space before a group or a number (custom-call's `literal=s32[2]{0} {1, 2}`, and
# `literal=s32[] 5`).
_VALUE = (r"(?:" + _braced(BRACE_DEPTH) + "|" + _STR
          + r"|\[[^\]]*\]|\((?:[^()]|\([^()]*\))*\)|[^\s,{}\"\[\]()]+"
          + r"|[ \t]+(?=[{(\d]|-[\d.i]|(?:true|false|inf|nan)\b))+")


# Whitespace, and /* comments */, around attribute names and values.
_GAP = r"(?:\s|/\*(?:[^*]|\*(?!/))*\*/)*"
_ATTRS = r"(?:," + _GAP + r"[A-Za-z_][\w.\-]*" + _GAP + "=" + _GAP + _VALUE + ")+"


def grammar_text() -> str:
    text = (Path(__file__).with_name("hlo.lark")).read_text()
    esc = lambda rx: rx.replace("/", r"\/")  # noqa: E731 -- inside a lark /regex/
    return (text.replace("%ATTRS%", esc(_ATTRS)).replace("%BRACED%", esc(_braced(BRACE_DEPTH)))
            .replace("%STR%", esc(_STR)))


# One `, name=value` of an ATTRS token: group 1 the name, group 2 the value.
_ATTR = re.compile(r"," + _GAP + r"([A-Za-z_][\w.\-]*)" + _GAP + "=" + _GAP + "(" + _VALUE + ")")
# A bare name (instruction, attribute), without the `%` sigil.
_NAME_RX = re.compile(r"[A-Za-z_][\w.\-]*")


def _term(t: dict, name: str) -> str:
    """Terminal `name`'s expression as an atomic group: it takes its first match or fails."""
    return f"(?>{t[name].pattern})"


def _name_and_shape(t: dict) -> str:
    """`[ROOT] name = [shape]` of an instruction line, the start both line patterns share."""
    return (rf"(?P<root>ROOT[ \t]+)?+(?P<name>{_term(t, 'INSTR_NAME')})[ \t]*"
            rf"(?:(?P<buffer>{_term(t, 'BUFFER_SHAPE')})|(?P<shape>{_term(t, 'SHAPE')}))?+"
            r"[ \t]*")


def line_pattern(t: dict) -> re.Pattern:
    """`[ROOT] name = [shape] opcode(operands)[, attributes]` on one line, spaces between:
    the terminals' own expressions, each atomic and each optional part possessive, so the
    match takes each terminal's first match at its position, as the walk does, or fails."""
    return re.compile(
        _name_and_shape(t) +
        rf"(?P<call>{_term(t, 'OPCALL')})[ \t]*(?P<attrs>{_term(t, 'ATTRS')})?+[ \t]*(?=\n|\Z)")


def head_pattern(t: dict) -> re.Pattern:
    """line_pattern's `[ROOT] name = [shape] opcode(` with an operand list of no brackets,
    strings or newlines, `)`, and no attributes: where it matches, OPCALL's own match is the
    same text, and the attributes are read as `_ATTR` matches one after another (what the
    ATTRS expression's repetition takes), so the line is line_pattern's match."""
    return re.compile(
        _name_and_shape(t) +
        r"(?P<op>[A-Za-z_][\w\-]*)[ \t]*\((?P<body>[^()\"\n]*)\)[ \t]*")
