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
from .errors import HloSyntaxError, position_of
from .ir import Computation, Instruction, Module, Shape
from .literals import LiteralError, parse_literal
from .opcodes import ALL_OPCODES
from .shape_parser import ShapeError, parse_array_shape, parse_shape

_STR = r'"(?:[^"\\]|\\.)*"'


def _braced(depth: int) -> str:
    inner = r"[^{}\"]|" + _STR
    rx = r"\{(?:" + inner + r")*\}"
    for _ in range(depth - 1):
        rx = r"\{(?:" + inner + "|" + rx + r")*\}"
    return rx


def grammar_text() -> str:
    text = (Path(__file__).with_name("hlo.lark")).read_text()
    return text.replace("%BRACED%", _braced(8).replace("/", r"\/"))


@lru_cache(maxsize=None)
def _lark(strict: bool = False, with_transformer: bool = True) -> Lark:
    return Lark(grammar_text(), parser="lalr", lexer="contextual", strict=strict,
                transformer=_Builder() if with_transformer else None, maybe_placeholders=False,
                cache=not strict)


_ATTR = re.compile(r',\s*([A-Za-z_][\w.\-]*)\s*=\s*((?:' + _braced(8)
                   + r'|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\([^()]*\)|[^\s,{}"\[\]()]+)+)')
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
        if isinstance(v, (A.CompRef, A.InstrRef)):
            v.offset = vpos
        elif isinstance(v, list):
            for r in v:
                r.offset = vpos
        out[name] = v
    return out


def _opt_attrs(children, owner: str) -> dict:
    last = children[-1] if children else None
    return _attrs(last if isinstance(last, Token) and last.type == "ATTRS" else None, owner)


class _Builder(Transformer):
    """Rule callbacks, run by the LALR parser as it reduces."""

    def tuple_shape(self, children):
        return Shape.tuple_of(_shape_of(c) for c in children)

    def param(self, children):
        tok, shape = children
        return (tok[:-1].strip().lstrip("%"), _shape_of(shape), tok)

    def signature(self, children):
        return ("signature", [c for c in children[:-1]], _shape_of(children[-1]))

    def instruction(self, children):
        i = 0
        is_root = False
        if children[0].type == "ROOT":
            is_root, i = True, 1
        name_tok, shape, call_tok = children[i:i + 3]
        name = name_tok[:-1].rstrip().lstrip("%")
        paren = call_tok.index("(")
        opcode = call_tok[:paren].rstrip()
        if opcode not in ALL_OPCODES:
            raise _err(f"unknown opcode '{opcode}'", call_tok.start_pos)
        instr = Instruction(name, opcode, _shape_of(shape), line=name_tok.line,
                            column=name_tok.column)
        instr.attrs = _attrs(children[i + 3] if len(children) > i + 3 else None, name)
        body = call_tok[paren + 1:-1]
        body_pos = call_tok.start_pos + paren + 1
        if opcode == "constant":
            self._constant(instr, body, body_pos)
            instr._operand_refs = []
        elif opcode == "parameter":
            if not body.strip().isdigit():
                raise _err(f"parameter '{name}' needs a parameter number, got '({body.strip()})'",
                           body_pos)
            instr.parameter_number = int(body)
            instr._operand_refs = []
        else:
            instr._operand_refs = self._operand_names(body, body_pos)
        instr._is_root = is_root
        return instr

    @staticmethod
    def _constant(instr: Instruction, body: str, pos: int) -> None:
        if "/*" in body:
            body = _COMMENTS.sub("", body)
        if body.strip() == "{...}":
            instr.literal_elided = True
            return
        if not body.strip():
            raise _err(f"constant '{instr.name}' has no literal", pos)
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
                if not re.fullmatch(r"[A-Za-z_][\w.\-]*", name):
                    raise _err(f"malformed operand '{stripped[:30]}'",
                               pos + start + part.index(stripped[0]))
                refs.append((name, pos + start + part.index(word)))
            elif body.strip():
                raise _err("empty operand in operand list", pos + start)
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
        instrs = [c for c in rest if isinstance(c, Instruction)]
        trailing = rest[-1] if rest and isinstance(rest[-1], Token) else None
        for key, value in _attrs(trailing, comp.name).items():
            if key != "execution_thread":
                raise _err(f"unknown computation attribute '{key}'", trailing.start_pos)
            comp.execution_thread = value
        comp.instructions = instrs
        comp.has_signature = sig is not None
        _resolve_computation(comp, sig)
        return comp

    def table_row(self, children):
        return (int(children[0]), str(children[1]))

    def stack_table(self, children):
        return ("table", str(children[0]), list(children[1:]))

    def header(self, children):
        return ("header", children[0], _opt_attrs(children[1:], "HloModule"))

    def start(self, children):
        return children


def _resolve_computation(comp: Computation, sig) -> None:
    by_name: dict[str, Instruction] = {}
    root = None
    for ins in comp.instructions:
        if ins.name in by_name:
            raise HloSyntaxError(f"duplicate instruction name '{ins.name}' in computation "
                                 f"'{comp.name}'", line=ins.line, column=ins.column)
        by_name[ins.name] = ins
        if ins._is_root:
            if root is not None:
                raise HloSyntaxError(f"computation '{comp.name}' has two ROOT instructions "
                                     f"('{root.name}' and '{ins.name}')", line=ins.line,
                                     column=ins.column)
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
        if ins.opcode == "parameter":
            n = ins.parameter_number
            if n in seen_params:
                raise HloSyntaxError(f"parameter number {n} used twice in computation "
                                     f"'{comp.name}'", line=ins.line, column=ins.column)
            seen_params[n] = ins
    if sorted(seen_params) != list(range(len(seen_params))):
        missing = sorted(set(range(len(seen_params))) - set(seen_params))
        raise HloSyntaxError(f"computation '{comp.name}' is missing parameter number "
                             f"{missing[0] if missing else '?'}", line=comp.line, column=comp.column)
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


def _resolve_module(module: Module, comps: list[Computation]) -> None:
    by_name: dict[str, Computation] = {}
    for c in comps:
        if c.name in by_name:
            raise HloSyntaxError(f"duplicate computation name '{c.name}'", line=c.line, column=c.column)
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


def _check_text(text: str) -> None:
    if not text.strip():
        raise HloSyntaxError("empty module: no HloModule header and no computations", line=1, column=1)
    m = re.search(r"[\x00-\x08\x0e-\x1f\x7f\ufffd]", text)
    if m:
        line, col = position_of(text, m.start())
        raise HloSyntaxError(f"binary data in HLO text (byte 0x{ord(m.group(0)) & 0xff:02x})",
                             line=line, column=col)


def _describe(tok_type: str) -> str:
    return {"NAME": "a name", "SHAPE": "a shape", "OPERANDS": "an operand list",
            "ATTRS": "', attribute=value'", "INSTR_NAME": "an instruction 'name ='",
            "OPCALL": "'opcode(operands)'", "LBRACE": "'{'", "RBRACE": "'}'", "EQUAL": "'='",
            "LPAR": "'('", "RPAR": "')'", "$END": "end of file", "__ANON_0": "'->'",
            "COLON": "':'", "COMMA": "','", "INT": "an integer", "STRING": "a string",
            "BRACED": "'{...}'", "PARAM_NAME": "a parameter 'name:'", "ROOT": "ROOT",
            "ENTRY": "ENTRY", "TABLE_NAME": "a table name"}.get(tok_type, tok_type)


def _syntax_error(e: UnexpectedInput, text: str) -> HloSyntaxError:
    expected = sorted({_describe(t) for t in (getattr(e, "expected", None) or
                                              getattr(e, "accepts", None) or [])})
    exp = (" (expected " + ", ".join(expected[:6]) + ")") if expected else ""
    if isinstance(e, UnexpectedEOF) or (isinstance(e, UnexpectedToken) and e.token.type == "$END"):
        line, col = position_of(text, len(text.rstrip()))
        return HloSyntaxError(f"unexpected end of file: module is truncated or a brace is "
                              f"unterminated{exp}", line=line, column=col)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        return HloSyntaxError(f"unexpected {_describe(tok.type)} '{str(tok)[:40]}'{exp}",
                              line=tok.line, column=tok.column)
    assert isinstance(e, UnexpectedCharacters)
    ch = text[e.pos_in_stream]
    what = {"(": "unbalanced '('", "{": "unbalanced or unterminated '{'",
            '"': "unterminated string literal"}.get(ch, f"unexpected character '{ch}'")
    if ch in "[":
        what = "malformed shape"
    return HloSyntaxError(what + exp, line=e.line, column=e.column)


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


def parse_file(path: str) -> Module:
    p = Path(path)
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line, col = position_of(data[:e.start].decode("utf-8", "replace"), e.start)
        raise HloSyntaxError(f"file is not UTF-8 text (byte 0x{data[e.start]:02x})", file=path,
                             line=line, column=col) from None
    return parse_module(text, str(path))
