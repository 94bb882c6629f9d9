"""Syntax-error diagnosis: turning a lark error, or a position in the text, into an
HloSyntaxError whose message says what is wrong ("unterminated string", "expected '=' after
attribute name 'x'", "computation 'f' is missing its closing '}'") rather than listing
tokens."""
from __future__ import annotations

import re

from ..dtypes import ELEMENT_TYPES
from ..errors import HloSyntaxError, position_of
from .parser_grammar import _NAME_RX, _STR


# What a terminal is, as a noun phrase for "expected ..." lists.
_EXPECTED = {
    "NAME": "a name", "SHAPE": "a shape", "ATTRS": "', attribute=value'",
    "INSTR_NAME": "an instruction ('name = shape opcode(operands)')",
    "OPCALL": "an opcode with its operands, like 'add(x, y)'", "LBRACE": "'{'", "RBRACE": "'}'",
    "LPAR": "'('", "RPAR": "')'", "$END": "the end of the file", "COLON": "':'", "COMMA": "','",
    "INT": "an integer", "STRING": "a string", "BRACED": "'{...}'",
    "PARAM_NAME": "a parameter ('name: shape')", "ROOT": "'ROOT'", "ENTRY": "'ENTRY'",
    "TABLE_NAME": "a stack-frame table name", "HLOMODULE": "'HloModule'",
    # The deep-nesting starts and buffer shapes read as what they complete to.
    "DEEP_CALL": "an opcode with its operands, like 'add(x, y)'",
    "DEEP_ATTRS": "', attribute=value'", "BUFFER_SHAPE": "a shape",
}
# What a token that was found is, as a noun (no article): "unexpected integer '5'".
_FOUND = {
    "NAME": "name", "SHAPE": "shape", "ATTRS": "attributes", "INSTR_NAME": "instruction",
    "OPCALL": "operation", "INT": "integer", "STRING": "string", "BRACED": "braced value",
    "PARAM_NAME": "parameter", "TABLE_NAME": "table name", "BUFFER_SHAPE": "shape",
    "DEEP_ATTRS": "attributes",
}


def _describe(tok_type: str) -> str:
    """A terminal as a noun phrase with its article, for lists of what was expected."""
    if tok_type in _EXPECTED:
        return _EXPECTED[tok_type]
    from .parser import _lark  # not at the top: the parser imports this module
    term = next((t for t in _lark().terminals if t.name == tok_type), None)
    if term is not None and term.pattern.type == "str":
        return f"'{term.pattern.value}'"
    noun = tok_type.lower().replace("_", " ").strip()
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _found(tok) -> str:
    """A found token, for "unexpected ...": `integer '5'`, `'}'`, `end of file`."""
    text = str(tok)
    short = text if len(text) <= 40 else text[:37] + "..."
    if tok.type in _FOUND:
        return f"{_FOUND[tok.type]} '{short}'"
    return f"'{short}'"


def _join(items: list[str]) -> str:
    items = sorted(set(items))
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def _expected(e) -> str:
    names = getattr(e, "expected", None) or getattr(e, "accepts", None) or []
    return _join([_describe(t) for t in names])


def _at(text: str, pos: int, msg: str) -> HloSyntaxError:
    line, col = position_of(text, pos)
    return HloSyntaxError(msg, line=line, column=col)


def _skip_ws(text: str, i: int, newlines: bool = True) -> int:
    n = len(text)
    while i < n and (text[i] in " \t\r" or (newlines and text[i] == "\n")):
        i += 1
    return i


def _close_of(text: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at i (strings skipped), or -1."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = text.find('"', i + 1)
            while j > 0 and text[j - 1] == "\\":
                j = text.find('"', j + 1)
            if j < 0:
                return -1
            i = j
        elif c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _diagnose_attrs(text: str, i: int) -> HloSyntaxError | None:
    """Attributes start at the ',' at i but do not lex: say exactly what is wrong."""
    n = len(text)
    while i < n and text[i] == ",":
        i = _skip_ws(text, i + 1)
        m = _NAME_RX.match(text, i)
        if not m:
            what = "the end of the file" if i >= n else f"'{text[i]}'"
            return _at(text, i, f"expected an attribute name after ',', found {what}")
        name = m.group(0)
        i = _skip_ws(text, m.end())
        if i >= n or text[i] != "=":
            return _at(text, m.end(), f"expected '=' after attribute name '{name}'")
        after_eq = i + 1
        i = _skip_ws(text, i + 1)
        start = i
        while i < n:
            c = text[i]
            if c == '"':
                m = re.compile(_STR).match(text, i)
                if not m:
                    return _at(text, i, f"unterminated string in the value of attribute "
                                        f"'{name}'")
                i = m.end()
            elif c in "{[(":
                close = {"{": "}", "[": "]", "(": ")"}[c]
                end = _close_of(text, i, c, close)
                if end < 0:
                    return _at(text, i, f"unterminated '{c}' in the value of attribute '{name}'")
                i = end + 1
            elif c.isspace():
                j = _skip_ws(text, i)
                if j < n and text[j] in "{(":
                    i = j
                    continue
                break
            elif c in ",}])":
                break
            else:
                i += 1
        if i == start:
            return _at(text, after_eq, f"attribute '{name}' has no value")
        i = _skip_ws(text, i)
    return None


def _diagnose_token(e: UnexpectedToken, text: str) -> HloSyntaxError | None:
    """A precise message for the common ways an instruction line goes wrong."""
    tok = e.token
    expected = set(getattr(e, "expected", None) or getattr(e, "accepts", None) or ())
    pos, word = tok.start_pos, str(tok)
    after = _skip_ws(text, tok.end_pos, newlines=False)
    if tok.type == "COMMA":
        found = _diagnose_attrs(text, pos)
        if found is not None:
            return found
    if tok.type == "LBRACE" and "OPCALL" in expected and text[pos - 1:pos] == "]":
        return _at(text, pos, "malformed shape: the layout '{' is not closed on this line")
    # After `name =` a shape or the opcode may come (XLA infers a missing shape); a word not
    # followed by `(` was meant as a shape.
    opcall = "OPCALL" in expected and not ("SHAPE" in expected and text[after:after + 1] != "(")
    if tok.type == "NAME" and opcall:
        if after < len(text) and text[after] == "(":
            return _at(text, after, f"unbalanced '(': the operand list of '{word}' is never "
                                    f"closed")
        if not text[after:].strip():
            return _at(text, len(text.rstrip()), f"unexpected end of file after '{word}': the "
                                                 f"module is truncated")
        return _at(text, tok.end_pos, f"expected '(' and the operands after opcode '{word}'")
    if tok.type == "NAME" and "SHAPE" in expected:
        if after < len(text) and text[after] == "[" and after == tok.end_pos:
            eol = text.find("\n", after)
            if "]" not in text[after:eol if eol >= 0 else None]:
                return _at(text, after, f"malformed shape: the '[' after '{word}' is never "
                                        f"closed")
            shape = text[pos:text.index("]", after) + 1]
            if word not in ELEMENT_TYPES:
                hint = (" (element types are lowercase, like f32)"
                        if word.lower() in ELEMENT_TYPES else "")
                return _at(text, pos, f"unknown element type '{word}' in shape '{shape}'{hint}")
            return _at(text, pos, f"malformed shape '{shape}'")
        if word in ELEMENT_TYPES:
            return _at(text, pos, f"malformed shape '{word}': dimensions in brackets must follow "
                                  f"the element type, like {word}[] or {word}[2,3]")
        return _at(text, pos, f"expected a shape like f32[2,3], found '{word}'")
    if tok.type == "OPCALL" and "SHAPE" in expected:
        op = word[:word.index("(")].rstrip()
        return _at(text, pos, f"missing shape before '{op}(...)': an instruction is "
                              f"'name = shape {op}(...)'")
    if tok.type == "NAME" and "INSTR_NAME" in expected:
        return _at(text, tok.end_pos, f"expected '=' after instruction name '{word}'")
    if tok.type == "RBRACE" and "RBRACE" not in expected:
        return _at(text, pos, "unbalanced '}': there is no open '{' here to close")
    if tok.type == "INT" and "INSTR_NAME" in expected:
        return _at(text, pos, f"instruction names must start with a letter or '_', found "
                              f"'{word}'")
    return None


def _open_computation(text: str) -> tuple[str, int] | None:
    """The last computation header `name ... {` before the end: (name, line)."""
    last = None
    for m in re.finditer(r"^[ \t]*(?:ENTRY\s+)?(%?[A-Za-z_][\w.\-]*)[^\n=]*\{[ \t]*(?://.*)?$",
                         text, re.M):
        last = m
    if last is None:
        return None
    return last.group(1).lstrip("%"), text.count("\n", 0, last.start()) + 1, last.end()


def _runaway_brace(text: str, start: int) -> HloSyntaxError | None:
    """An attribute `name={` after `start` whose '}' is not on its own line: it swallowed the
    computation's closing brace.  (Only asked when the file ended too soon.)"""
    for m in re.finditer(r"[,{]\s*([A-Za-z_][\w.\-]*)\s*=\s*\{", text[start:]):
        brace = start + m.end() - 1
        eol = text.find("\n", brace)
        close = _close_of(text, brace, "{", "}")
        if close < 0 or (0 <= eol < close):
            return _at(text, brace, f"unterminated '{{' in the value of attribute "
                                    f"'{m.group(1)}' (no '}}' on its line)")
    return None


def _syntax_error(e: UnexpectedInput, text: str) -> HloSyntaxError:
    # lark is imported only where it reads a text (parser._lark): not on the common path.
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken
    exp = _expected(e)
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        pos = len(text.rstrip())
        names = set(getattr(e, "expected", None) or getattr(e, "accepts", None) or ())
        comp = _open_computation(text)
        if comp is not None and "RBRACE" in names:
            runaway = _runaway_brace(text, comp[2])
            if runaway is not None:
                return runaway
            return _at(text, pos, f"unexpected end of file: computation '{comp[0]}' (line "
                                  f"{comp[1]}) is missing its closing '}}'")
        return _at(text, pos, "unexpected end of file: the module is truncated"
                              + (f" (expected {exp})" if exp else ""))
    if isinstance(e, UnexpectedToken):
        specific = _diagnose_token(e, text)
        if specific is not None:
            return specific
        tok = e.token
        return HloSyntaxError(f"unexpected {_found(tok)}" + (f"; expected {exp}" if exp else ""),
                              line=tok.line, column=tok.column)
    assert isinstance(e, UnexpectedCharacters)
    pos = e.pos_in_stream
    ch = text[pos]
    if ch == '"':
        return _at(text, pos, "unterminated string literal")
    if ch == "[":
        m = re.search(r"[\w.\-]*$", text[:pos])
        start = m.start() if m else pos
        return _at(text, start, f"malformed shape '{text[start:pos + 1]}...': element types "
                                f"are lowercase, like f32[2,3]")
    shown = ch if ch.isprintable() else f"\\x{ord(ch):02x}"
    return _at(text, pos, f"unexpected character '{shown}'" + (f"; expected {exp}" if exp else ""))
