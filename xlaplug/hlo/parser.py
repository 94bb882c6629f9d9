"""HLO text -> Module.

The lark LALR parser (hlo.lark) runs with the transformer applied inside the parser, so no
parse tree is ever built: each rule callback builds IR directly.  Names (operands, called
computations, control predecessors) are resolved once a computation, then the module, is
complete, so forward references work as they do in XLA's parser.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from . import attributes as A
from .dtypes import ELEMENT_TYPES
from .errors import HloSyntaxError, position_of
from .ir import Computation, Instruction, Module, Shape
from .literals import LiteralError, parse_literal
from .opcodes import ALL_OPCODES
from .shape_parser import ShapeError, parse_array_shape

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
# One attribute value: brace groups, strings, [..] and (..) groups, plain characters, and
# a space before a group or a number (custom-call's `literal=s32[2]{0} {1, 2}`, and
# `literal=s32[] 5`).
_VALUE = (r"(?:" + _braced(BRACE_DEPTH) + "|" + _STR
          + r"|\[[^\]]*\]|\([^()]*\)|[^\s,{}\"\[\]()]+"
          + r"|[ \t]+(?=[{(\d]|-[\d.i]|(?:true|false|inf|nan)\b))+")


# Whitespace, and /* comments */, around attribute names and values.
_GAP = r"(?:\s|/\*(?:[^*]|\*(?!/))*\*/)*"
_ATTRS = r"(?:," + _GAP + r"[A-Za-z_][\w.\-]*" + _GAP + "=" + _GAP + _VALUE + ")+"


def grammar_text() -> str:
    text = (Path(__file__).with_name("hlo.lark")).read_text()
    esc = lambda rx: rx.replace("/", r"\/")  # noqa: E731 -- inside a lark /regex/
    return (text.replace("%ATTRS%", esc(_ATTRS)).replace("%BRACED%", esc(_braced(BRACE_DEPTH)))
            .replace("%STR%", esc(_STR)))


@lru_cache(maxsize=None)
def _lark(strict: bool = False, with_transformer: bool = True) -> Lark:
    return Lark(grammar_text(), parser="lalr", lexer="contextual", strict=strict,
                transformer=_Builder() if with_transformer else None, maybe_placeholders=False)


_ATTR = re.compile(r"," + _GAP + r"([A-Za-z_][\w.\-]*)" + _GAP + "=" + _GAP + "(" + _VALUE + ")")
_COMMENTS = re.compile(r"/\*.*?\*/", re.S)


class _Ctx:
    """Per-parse state the callbacks need (the text, for error positions)."""
    text = ""


def _err(msg: str, pos: int) -> HloSyntaxError:
    line, col = position_of(_Ctx.text, pos)
    return HloSyntaxError(msg, line=line, column=col)


def _shape_of(tok) -> Shape:
    if isinstance(tok, Shape):
        return tok
    try:
        return parse_array_shape(str(tok))
    except ShapeError as e:
        raise _err(str(e), tok.start_pos) from None


def _attrs(tok, owner: str) -> dict:
    """The ATTRS token (all `, name=value` of one instruction) -> {name: typed value}."""
    out: dict = {}
    if tok is None:
        return out
    base = tok.start_pos
    for m in _ATTR.finditer(tok):
        name, value = m.group(1), m.group(2)
        vpos = base + m.start(2)
        if name in out:
            raise _err(f"attribute '{name}' given twice on '{owner}'", base + m.start(1))
        try:
            v = A.parse_attr(name, value)
        except (A.AttrError, ShapeError) as e:
            raise _err(f"attribute '{name}': {e}", vpos + getattr(e, "offset", 0)) from None
        if isinstance(v, A.CompRef):  # fresh objects (not cached): positions are per use
            v.offset += vpos
        elif isinstance(v, list):
            for r in v:
                r.offset += vpos
        out[name] = v
    return out


def _opt_attrs(children, owner: str) -> dict:
    last = children[-1] if children else None
    return _attrs(last if isinstance(last, Token) and last.type == "ATTRS" else None, owner)


_NAME_RX = re.compile(r"[A-Za-z_][\w.\-]*")
_SHAPED_OPERAND = re.compile(r"(?:[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|\(.*\))\s+%?[A-Za-z_][\w.\-]*",
                             re.S)


_DIGITS = re.compile(r"[0-9]+")


def _parameter_number(name: str, body: str, pos: int) -> int:
    text = body.strip()
    at = pos + len(body) - len(body.lstrip())
    if _DIGITS.fullmatch(text):
        return int(text)
    if not text:
        raise _err(f"parameter '{name}' is missing its parameter number: expected "
                   f"parameter(N)", pos)
    if re.fullmatch(r"-\d+", text):
        raise _err(f"parameter number must be >= 0, got {text}", at)
    raise _err(f"parameter '{name}' needs an integer parameter number, like parameter(0), "
               f"got '{text[:30]}'", at)


def _is_async_sugar(opcode: str) -> bool:
    """XLA prints an async op wrapping a single instruction as `<op>-start`, `<op>-update`,
    `<op>-done` (e.g. `fusion-start`) with the wrapped op's attributes."""
    base, dash, phase = opcode.rpartition("-")
    return bool(dash) and phase in ("start", "update", "done") and base in ALL_OPCODES


def _opcode_hint(opcode: str) -> str:
    import difflib
    close = difflib.get_close_matches(opcode.lower(), sorted(ALL_OPCODES), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Builder(Transformer):
    """Rule callbacks, run by the LALR parser as it reduces."""

    # List rules (`x: y | x y`, `x: y | x "," y`): one Python list, appended to in place.
    @staticmethod
    def _append(children):
        if len(children) == 1:
            return [children[0]]
        children[0].append(children[-1])
        return children[0]

    items = instructions = params = shapes = table_rows = _append

    def tuple_shape(self, children):
        return Shape.tuple_of(_shape_of(c) for c in (children[0] if children else ()))

    def param(self, children):
        tok, shape = children
        return (tok[:-1].strip().lstrip("%"), _shape_of(shape), tok)

    def signature(self, children):
        params = children[0] if len(children) == 2 else []
        return ("signature", params, _shape_of(children[-1]))

    def instruction(self, children):
        i = 0
        root_tok = None
        if children[0].type == "ROOT":
            root_tok, i = children[0], 1
        name_tok, shape, call_tok = children[i:i + 3]
        name = name_tok[:-1].rstrip().lstrip("%")
        paren = call_tok.index("(")
        opcode = call_tok[:paren].rstrip()
        if opcode not in ALL_OPCODES and not _is_async_sugar(opcode):
            raise _err(f"unknown opcode '{opcode}'{_opcode_hint(opcode)}", call_tok.start_pos)
        instr = Instruction(name, opcode, _shape_of(shape), line=name_tok.line,
                            column=name_tok.column)
        instr.attrs = _attrs(children[i + 3] if len(children) > i + 3 else None, name)
        body = call_tok[paren + 1:-1]
        body_pos = call_tok.start_pos + paren + 1
        if opcode == "constant":
            self._constant(instr, body, body_pos)
            instr._operand_refs = []
        elif opcode == "parameter":
            instr.parameter_number = _parameter_number(name, body, body_pos)
            instr._operand_refs = []
        else:
            instr._operand_refs = self._operand_names(body, body_pos)
        instr._is_root = root_tok is not None
        if root_tok is not None:
            instr._root_at = (root_tok.line, root_tok.column)
        return instr

    @staticmethod
    def _constant(instr: Instruction, body: str, pos: int) -> None:
        if "/*" in body:  # blank comments out, keeping offsets for error positions
            body = _COMMENTS.sub(lambda m: " " * len(m.group(0)), body)
        if body.strip() == "{...}":
            instr.literal_elided = True
            return
        if not body.strip():
            raise _err(f"constant '{instr.name}' has no literal: expected constant(value)", pos)
        if instr.shape.is_token or instr.shape.element_type == "opaque":
            raise _err(f"constant '{instr.name}' has shape {instr.shape}, which has no literal",
                       pos)
        try:
            instr.literal = parse_literal(body, instr.shape)
        except LiteralError as e:
            raise _err(f"constant '{instr.name}': {e}", pos + e.offset) from None

    @staticmethod
    def _operand_names(body: str, pos: int) -> list[tuple[str, int]]:
        if "/*" in body:
            body = _COMMENTS.sub(lambda m: " " * len(m.group(0)), body)
        refs = []
        start = 0
        for part in body.split(","):
            stripped = part.strip()
            if stripped:
                # Older XLA prints operand shapes too: `f32[2]{0} %a`; the name is last.
                word = stripped.rsplit(None, 1)[-1] if " " in stripped else stripped
                name = word.lstrip("%")
                at = pos + start + part.index(stripped[0])
                if not _NAME_RX.fullmatch(name) or (word is not stripped and not
                                                    _SHAPED_OPERAND.fullmatch(stripped)):
                    raise _err(f"malformed operand '{stripped[:30]}': expected an instruction "
                               f"name", at)
                refs.append((name, pos + start + part.rindex(word)))
            elif body.strip():
                raise _err("empty operand in operand list (a stray ',')", pos + start)
            start += len(part) + 1
        return refs

    def computation(self, children):
        i = 0
        is_entry = False
        if isinstance(children[0], Token) and children[0].type == "ENTRY":
            is_entry, i = True, 1
        name_tok = children[i]
        comp = Computation(name_tok.lstrip("%"), is_entry=is_entry, line=name_tok.line,
                           column=name_tok.column)
        sig = None
        rest = children[i + 1:]
        if rest and isinstance(rest[0], tuple) and rest[0][0] == "signature":
            sig, rest = rest[0], rest[1:]
        instrs = rest[0] if rest and isinstance(rest[0], list) else []
        trailing = rest[-1] if rest and isinstance(rest[-1], Token) else None
        for key, value in _attrs(trailing, comp.name).items():
            if key != "execution_thread":
                at = trailing.start_pos + re.search(rf"\b{re.escape(key)}\s*=", trailing).start()
                raise _err(f"unknown computation attribute '{key}' (only execution_thread is "
                           f"allowed)", at)
            comp.execution_thread = value
        comp.instructions = instrs
        comp.has_signature = sig is not None
        _resolve_computation(comp, sig)
        return comp

    def table_row(self, children):
        return (int(children[0]), str(children[1]))

    def stack_table(self, children):
        return ("table", str(children[0]), children[1] if len(children) > 1 else [])

    def header(self, children):
        return ("header", children[0], _opt_attrs(children[1:], "HloModule"))

    def start(self, children):
        items = children[-1] if children and isinstance(children[-1], list) else []
        return ([children[0]] if children and isinstance(children[0], tuple) else []) + items


def _resolve_computation(comp: Computation, sig) -> None:
    by_name: dict[str, Instruction] = {}
    root = None
    for ins in comp.instructions:
        first = by_name.get(ins.name)
        if first is not None:
            raise HloSyntaxError(f"duplicate instruction name '{ins.name}' in computation "
                                 f"'{comp.name}' (first defined at line {first.line})",
                                 line=ins.line, column=ins.column)
        by_name[ins.name] = ins
        if ins._is_root:
            if root is not None:
                line, col = ins._root_at
                raise HloSyntaxError(f"computation '{comp.name}' has a second ROOT "
                                     f"instruction '{ins.name}' (the first is '{root.name}' at "
                                     f"line {root.line})", line=line, column=col)
            root = ins
    if not comp.instructions:
        raise HloSyntaxError(f"computation '{comp.name}' has no instructions", line=comp.line,
                             column=comp.column)
    comp.root = root or comp.instructions[-1]
    seen_params: dict[int, Instruction] = {}
    for ins in comp.instructions:
        ops = []
        for name, pos in ins._operand_refs:
            target = by_name.get(name)
            if target is None:
                raise _err(f"instruction '{ins.name}' uses undefined operand '{name}'", pos)
            ops.append(target)
        ins.operands = ops
        preds = ins.attrs.pop("control-predecessors", None)
        if preds is not None:
            for r in preds:
                if r.name not in by_name:
                    raise _err(f"instruction '{ins.name}' names undefined control predecessor "
                               f"'{r.name}'", r.offset)
            ins.control_predecessors = [by_name[r.name] for r in preds]
        del ins._operand_refs, ins._is_root
        if hasattr(ins, "_root_at"):
            del ins._root_at
        if ins.opcode == "parameter":
            n = ins.parameter_number
            if n in seen_params:
                raise HloSyntaxError(f"parameter number {n} used twice in computation "
                                     f"'{comp.name}'", line=ins.line, column=ins.column)
            seen_params[n] = ins
    if sorted(seen_params) != list(range(len(seen_params))):
        missing = min(set(range(len(seen_params) + 1)) - set(seen_params))
        after = max(seen_params)
        p = seen_params[after]
        raise HloSyntaxError(f"computation '{comp.name}' has parameter({after}) but no "
                             f"parameter({missing}): parameter numbers must be 0 to "
                             f"{len(seen_params) - 1}", line=p.line, column=p.column)
    if sig is not None:
        params, result = sig[1], sig[2]
        if len(params) != len(seen_params):
            raise HloSyntaxError(f"computation '{comp.name}' signature lists {len(params)} "
                                 f"parameters but the body has {len(seen_params)}",
                                 line=comp.line, column=comp.column)
        for num, (pname, pshape, tok) in enumerate(params):
            p = seen_params[num]
            if not pshape.compatible(p.shape):
                raise _err(f"signature parameter '{pname}' has shape {pshape}, but parameter "
                           f"{num} '{p.name}' is {p.shape}", tok.start_pos)
        if not result.compatible(comp.root.shape):
            raise HloSyntaxError(f"computation '{comp.name}' signature returns "
                                 f"{result.without_layout()}, but its root '{comp.root.name}' "
                                 f"is {comp.root.shape.without_layout()}", line=comp.line,
                                 column=comp.column)


def _resolve_module(module: Module, comps: list[Computation]) -> None:
    by_name: dict[str, Computation] = {}
    for c in comps:
        first = by_name.get(c.name)
        if first is not None:
            raise HloSyntaxError(f"duplicate computation name '{c.name}' (first defined at line "
                                 f"{first.line})", line=c.line, column=c.column)
        by_name[c.name] = c

    def look(ref: A.CompRef, owner: Instruction) -> Computation:
        c = by_name.get(ref.name)
        if c is None:
            raise _err(f"instruction '{owner.name}' calls undefined computation '{ref.name}'",
                       ref.offset)
        return c

    for c in comps:
        for ins in c.instructions:
            for k, v in ins.attrs.items():
                if isinstance(v, A.CompRef):
                    ins.attrs[k] = look(v, ins)
                elif isinstance(v, list) and v and isinstance(v[0], A.CompRef):
                    ins.attrs[k] = [look(r, ins) for r in v]
    entries = [c for c in comps if c.is_entry]
    if len(entries) > 1:
        raise HloSyntaxError(f"more than one ENTRY computation ('{entries[0].name}' and "
                             f"'{entries[1].name}')", line=entries[1].line, column=entries[1].column)
    module.computations = comps
    # Without ENTRY, XLA takes the last computation as the entry.
    module.entry = entries[0] if entries else comps[-1]


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _check_text(text: str) -> None:
    if not text.strip():
        raise HloSyntaxError("empty module: no HloModule header and no computations", line=1,
                             column=1)
    m = _CONTROL.search(text)
    if m:
        line, col = position_of(text, m.start())
        raise HloSyntaxError(f"binary data in HLO text (control character 0x{ord(m.group(0)):02x})",
                             line=line, column=col)


# What a terminal is, as a noun phrase for "expected ..." lists.
_EXPECTED = {
    "NAME": "a name", "SHAPE": "a shape", "ATTRS": "', attribute=value'",
    "INSTR_NAME": "an instruction ('name = shape opcode(operands)')",
    "OPCALL": "an opcode with its operands, like 'add(x, y)'", "LBRACE": "'{'", "RBRACE": "'}'",
    "LPAR": "'('", "RPAR": "')'", "$END": "the end of the file", "COLON": "':'", "COMMA": "','",
    "INT": "an integer", "STRING": "a string", "BRACED": "'{...}'",
    "PARAM_NAME": "a parameter ('name: shape')", "ROOT": "'ROOT'", "ENTRY": "'ENTRY'",
    "TABLE_NAME": "a stack-frame table name", "HLOMODULE": "'HloModule'",
}
# What a token that was found is, as a noun (no article): "unexpected integer '5'".
_FOUND = {
    "NAME": "name", "SHAPE": "shape", "ATTRS": "attributes", "INSTR_NAME": "instruction",
    "OPCALL": "operation", "INT": "integer", "STRING": "string", "BRACED": "braced value",
    "PARAM_NAME": "parameter", "TABLE_NAME": "table name",
}


def _describe(tok_type: str) -> str:
    """A terminal as a noun phrase with its article, for lists of what was expected."""
    if tok_type in _EXPECTED:
        return _EXPECTED[tok_type]
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
                if c == "{" and not re.compile(_braced(BRACE_DEPTH)).fullmatch(text, i, end + 1):
                    return _at(text, i, f"the value of attribute '{name}' nests braces deeper "
                                        f"than {BRACE_DEPTH} levels, which is not supported")
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
    if tok.type == "NAME" and "OPCALL" in expected:
        if after < len(text) and text[after] == "(":
            if _close_of(text, after, "(", ")") < 0:
                return _at(text, after, f"unbalanced '(': the operand list of '{word}' is never "
                                        f"closed")
            return _at(text, after, f"the operand list of '{word}' nests parentheses too "
                                    f"deeply (more than 5 levels)")
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


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse HLO text.  Raises HloSyntaxError with a position on malformed input."""
    try:
        _check_text(text)
        _Ctx.text = text
        try:
            items = _lark().parse(text)
        except UnexpectedInput as e:
            raise _syntax_error(e, text) from None
        header = next((x for x in items if isinstance(x, tuple) and x[0] == "header"), None)
        comps = [x for x in items if isinstance(x, Computation)]
        if not comps:
            raise HloSyntaxError("module has no computations", line=1, column=1)
        name = str(header[1]).lstrip("%") if header else Path(filename).stem
        module = Module(name, attrs=header[2] if header else {}, source=filename)
        for x in items:
            if isinstance(x, tuple) and x[0] == "table":
                module.stack_tables[x[1]] = x[2]
        _resolve_module(module, comps)
        return module
    except HloSyntaxError as e:
        raise e.located(filename, text) from None
    finally:
        _Ctx.text = ""


_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1f\x7f]")


def parse_file(path: str) -> Module:
    p = Path(path)
    data = p.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark is not text
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = e.start
        ctrl = _CONTROL_BYTES.search(data, 0, bad)
        at = ctrl.start() if ctrl else bad
        before = data[:at].decode("utf-8")   # valid: the first bad byte is at e.start
        line, col = position_of(before, len(before))
        msg = (f"binary data in HLO text (control character 0x{data[at]:02x})" if ctrl else
               f"file is not UTF-8 text (byte 0x{data[at]:02x})")
        err = HloSyntaxError(msg, file=str(path), line=line, column=col)
        raise err.located(str(path), data.decode("utf-8", "replace")) from None
    return parse_module(text, str(path))
