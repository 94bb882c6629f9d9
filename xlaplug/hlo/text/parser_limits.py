"""Checks of the whole text before it is parsed: how deep it nests, and what a digit is.

Nesting.  XLA's parser (xla/hlo/parser/hlo_parser.cc) counts one recursion depth: +1 for
each shape it reads (a tuple's `(` and each shape inside it, a leaf array shape too), each
operand list `(...)` and each nested computation, and past
`HloParserOptions::kDefaultMaxRecursionDepth` (500) stops with "maximum recursion depth
exceeded" at the token it was reading.  Here the count is the parentheses open outside
strings and comments (tuple shapes, operand lists -- nested instructions included), plus one
for the shape or name read inside the innermost: the 501st `(`, or a token read inside 500
of them, is the error, at its line and column; a computation written inline (`to_apply={
p = ... }`) is a level too.  Other braces are not counted (XLA reads layouts,
dense literals and JSON configs without recursing; parser_deep.py bounds them).  Bounding the
depth here bounds every recursion after the parser -- the verifier, the passes, printing
a shape -- so none of them can exhaust Python's stack or the C stack.

Digits.  XLA's lexer reads ASCII 0-9 only; Python's int() reads any script's digits
(`f32[٤]` would be f32[4]).  A non-ASCII digit or numeral outside a string or comment is an
error at its position.
"""
from __future__ import annotations

import re
import sys
import unicodedata
from contextlib import contextmanager

from ..errors import HloSyntaxError, position_of

MAX_DEPTH = 500  # XLA's HloParserOptions::kDefaultMaxRecursionDepth
# Python frames a text within MAX_DEPTH needs (several per level, in the parser and in what
# walks shapes after it), and few enough that the C stack cannot overflow first.
RECURSION_ROOM = 20 * MAX_DEPTH
TOO_DEEP = "maximum recursion depth exceeded"  # XLA's message
# What the scan stops at: strings and comments (skipped whole), parentheses, and any
# non-ASCII character (a digit of another script, or anything else: only digits matter).
# A flat brace group of ASCII text (a layout, `dimensions={0}`) holds no level: one match.
_SCAN = re.compile(r'\{[^{}()"/\x80-\U0010ffff]*\}|"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/'
                   r'|[(){}]|[^\x00-\x7f]', re.S)
# A `{` that opens a computation written inline (`to_apply={ p = ... }`): a level, as XLA's
# ParseHloComputation counts one.
_INLINE = re.compile(r"\b(?:to_apply|calls|body|condition|true_computation|false_computation"
                     r"|branch_computations|called_computations|scatter|select)\s*=\s*\{?\s*$")
# XLA reads `parameter(0)` and `constant(...)`'s literal without an operand list: no level.
_NOT_A_LEVEL = re.compile(r"\b(?:parameter|constant)\s*$")
_SIGNIFICANT = re.compile(r'(?:\s|//[^\n]*|/\*.*?\*/|,)*', re.S)


def check_limits(text: str) -> None:
    """Raise HloSyntaxError (with line and column) at the first non-ASCII numeral outside
    strings and comments, or where the text nests deeper than XLA's parser reads."""
    # `={` counted only when the `(` leave room (a large module has thousands of them).
    if text.isascii() and ((n := text.count("(")) < MAX_DEPTH and n + text.count("={") < MAX_DEPTH
                           or _bracket_depth(text) < MAX_DEPTH):
        return  # the common case: nothing to find (the tests run at C speed)
    depth = 0
    counted: list[bool] = []  # per open `(`: is it a level (not `parameter(` / `constant(`)
    for m in _SCAN.finditer(text):
        c = m.group(0)
        if len(c) > 1:
            continue  # a string, a comment, a flat brace group
        if c in "({":
            level = (not _NOT_A_LEVEL.search(text, max(0, m.start() - 12), m.start())
                     if c == "(" else _inline_computation(text, m.start()))
            counted.append(level)
            depth += level
            if depth > MAX_DEPTH:
                raise _at(text, m.start(), TOO_DEEP + _why())
            if depth == MAX_DEPTH and level:
                _check_innermost(text, m.end())
        elif c in ")}":
            if counted:
                depth -= counted.pop()
        elif not c.isascii() and _numeral(c):
            raise _at(text, m.start(), f"'{c}' ({unicodedata.name(c, 'U+%04X' % ord(c))}) is "
                                       f"not a digit: only ASCII 0-9 are numbers in HLO text")


# Strings and comments, as the scan skips them; then the innermost bracket groups.
_QUOTED = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|/\*.*?\*/', re.S)  # _SCAN's, unrolled
_INNERMOST = re.compile(r"[({][^(){}]*[)}]")
# A text with no backslash and no `//` or `/*` has no escapes and no comments: its strings
# and brackets are found in it with every other character deleted (but line ends, which
# end a string), at C speed.
_BRACKETS_ONLY = str.maketrans("", "", "".join(chr(c) for c in range(128)
                                               if chr(c) not in '"(){}\n'))
_PLAIN_STRING = re.compile(r'"[^"\n]*"')


def _bracket_depth(text: str) -> int:
    """How deep `(` and `{` nest outside strings and comments, or MAX_DEPTH when that is not
    found in a few passes (or they do not pair up): a bound on the scan's depth, which counts
    only some of them, at C speed.  Each pass removes the innermost groups."""
    if "\\" in text or "//" in text or "/*" in text:
        text = _QUOTED.sub("", text)
    else:
        text = _PLAIN_STRING.sub("", text.translate(_BRACKETS_ONLY)).replace("\n", "")
    for depth in range(16):
        if not any(c in text for c in "(){}"):
            return depth
        text, n = _INNERMOST.subn("", text)
        if not n:
            break
    return MAX_DEPTH


def _check_innermost(text: str, i: int) -> None:
    """At MAX_DEPTH levels: a shape (or a literal) is read one level deeper, past the limit;
    an operand named without a shape is not, nor an empty `()` (a `(` is reported by the
    caller, one level deeper).  In a computation written inline, its first instruction's
    shape is what is read first."""
    i = _SIGNIFICANT.match(text, i).end()
    m = _INSTRUCTION.match(text, i)
    if m is not None:
        i = _SIGNIFICANT.match(text, m.end()).end()
    elif _BARE_NAME.match(text, i):
        return
    if i < len(text) and text[i] not in "()":
        raise _at(text, i, TOO_DEEP + _why())


_BARE_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*\s*[,)]")


def _inline_computation(text: str, i: int) -> bool:
    """Whether the `{` at text[i] opens a computation written inline (and not the braces of
    a list of names, a layout or a literal): an attribute that names computations, followed
    by an instruction (`name =`)."""
    if not _INLINE.search(text, max(0, i - 40), i):
        return False
    return bool(_INSTRUCTION.match(text, i + 1))


_INSTRUCTION = re.compile(r"\s*(?:ROOT\s+)?%?[A-Za-z_][\w.\-]*\s*=(?!=)")


@contextmanager
def recursion_room():
    """Python's recursion limit raised to RECURSION_ROOM while a command walks a module:
    shapes and nested instructions within XLA's depth are walked recursively (the verifier,
    the passes, printing), and an unbounded recursion still ends in RecursionError (a clean
    error) well before it could overflow the C stack."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, RECURSION_ROOM))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _why() -> str:
    return (f" (more than {MAX_DEPTH} nested shapes and operand lists, XLA's parser's "
            f"limit)")


def _numeral(c: str) -> bool:
    return c.isdigit() or c.isdecimal() or c.isnumeric()


def _at(text: str, pos: int, msg: str) -> HloSyntaxError:
    line, col = position_of(text, pos)
    return HloSyntaxError(msg, line=line, column=col)
