"""The state of one parse and errors at an offset.  lark's callbacks cannot be handed an
argument, so what a parse must remember (its text, the computations read so far, ...) is a
ParseState in a context variable, current for that parse only: parses in two threads never
see each other's, and nothing of a parse outlives it.  The callbacks raise errors at a
character offset (`_err`); the parse that owns the text places them (`at_offset`)."""
from __future__ import annotations

import contextvars

from ..errors import HloSyntaxError, position_of


class ParseState:
    """What one parse needs to remember while lark's callbacks run: its text (for positions
    the callbacks compute), the computations read so far by name, the inline computations
    and the deep-nesting lexer's state.  It lives in a context variable set by
    `parse_state` for the parse, so parses in two threads never see each other's."""

    def __init__(self, text: str = ""):
        self.text = text
        self.done: dict = {}
        self.inline: list = []
        self.deep: list = [None]
        self.metadata: dict = {}  # metadata text -> its fields, read once per parse
        self.literals: dict = {}  # (short literal text, shape) -> its array (parser_instr)
        # The last instruction text whose brackets were mapped (parser_operands._partners):
        # (start, its text, {open position: close position}).
        self.region: tuple = (0, "", {})
        self._token = None

    def close(self) -> None:
        if self._token is not None:
            _PARSE.reset(self._token)
            self._token = None


_PARSE: contextvars.ContextVar[ParseState] = contextvars.ContextVar("xlaplug_parse")


def parse_state(text: str) -> ParseState:
    """A fresh state for a parse of `text`, current until its `close()`."""
    state = ParseState(text)
    state._token = _PARSE.set(state)
    return state


def current_parse() -> ParseState:
    state = _PARSE.get(None)
    if state is None:  # outside a parse (a helper used on its own): a state of its own
        state = ParseState()
        _PARSE.set(state)
    return state


class _CtxMeta(type):
    @property
    def text(cls) -> str:
        return current_parse().text

    @text.setter
    def text(cls, value: str) -> None:
        current_parse().text = value


class _Ctx(metaclass=_CtxMeta):
    """`_Ctx.text`: the text of the parse under way (current_parse().text)."""


class StateView:
    """A name that reads as one of the current parse's tables (`DONE`, `INLINE`, `CURRENT`),
    so the modules that share them keep plain dict/list syntax."""

    def __init__(self, field: str):
        object.__setattr__(self, "_field", field)

    def _target(self):
        return getattr(current_parse(), self._field)

    def __getattr__(self, name):
        return getattr(self._target(), name)

    def __getitem__(self, k):
        return self._target()[k]

    def __setitem__(self, k, v):
        self._target()[k] = v

    def __delitem__(self, k):
        del self._target()[k]

    def __iter__(self):
        return iter(self._target())

    def __len__(self):
        return len(self._target())

    def __contains__(self, k):
        return k in self._target()


def _err(msg: str, pos: int) -> HloSyntaxError:
    """An error at character offset `pos` of the text being parsed.  The callbacks do not
    hold the text: `at_offset` turns the offset into a line and column where the parse that
    owns the text catches the error (so no per-parse state lives outside the parse)."""
    e = HloSyntaxError(msg)
    e.offset = pos
    return e


def at_offset(e: HloSyntaxError, text: str) -> HloSyntaxError:
    """Give an error raised by `_err` its line and column in `text`."""
    offset = getattr(e, "offset", None)
    if offset is not None and not e.line:
        e.line, e.column = position_of(text, offset)
    return e
