"""Mutations of HLO text for scripts/fuzz.py: byte, token and structural.

Every mutation is a pure function of (text, random.Random): the same seed gives the same
mutant on every machine.  Structural mutations aim at what a user (or a broken producer)
can write that a token flip rarely finds: calls that recurse, operands used before their
definition or in a cycle, unbounded or huge shapes, loops that never end.
"""
from __future__ import annotations

import random
import re

TOKEN = re.compile(r"%?[A-Za-z_][\w.\-]*|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|\S")
INSTR = re.compile(r"^(\s*(?:ROOT\s+)?)(%?[\w.\-]+)(\s*=\s*)(.*)$")
CALLED = re.compile(r"\b(to_apply|body|condition|calls|true_computation|false_computation)="
                    r"(%?[\w.\-]+)")
SHAPE = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,?<= ]*)\]")

ODD_VALUES = ["-1", "0", "1", "2147483648", "-2147483649", "9223372036854775808", "1e400",
              "nan", "inf", "-0", "?", "<=3", "{", "}", "(", ")", ",", "=", "\"", "%",
              "ROOT", "ENTRY", "{...}", "f32[]", "pred[?]", "s32[0]", "f64[1000000000]",
              "(f32[], s32[])", "token[]", "\x00", "\n", "é"]
ODD_OPCODES = ["add", "abs", "call", "while", "tuple", "get-tuple-element", "reduce", "sort",
               "broadcast", "reshape", "dot", "custom-call", "conditional", "fusion",
               "dynamic-slice", "gather", "scatter", "iota", "constant", "parameter",
               "after-all", "rng", "copy-start", "all-reduce", "convolution", "bitcast"]
ODD_TYPES = ["pred", "s4", "s8", "s32", "s64", "u8", "u64", "f16", "bf16", "f32", "f64",
             "c64", "c128", "f8e4m3fn", "token", "tuple", "opaque"]


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _instr_lines(lines: list[str]) -> list[int]:
    return [k for k, ln in enumerate(lines) if INSTR.match(ln) and "(" in ln]


def _one_computation(lines: list[str], rng: random.Random) -> list[int]:
    """The instruction lines of one computation with at least two (else all of them)."""
    groups: list[list[int]] = [[]]
    for k, ln in enumerate(lines):
        if ln.strip() == "}":
            groups.append([])
        elif INSTR.match(ln) and "(" in ln:
            groups[-1].append(k)
    groups = [g for g in groups if len(g) >= 2]
    return rng.choice(groups) if groups else _instr_lines(lines)


# ---- byte mutations --------------------------------------------------------------------

def flip_byte(text: str, rng: random.Random) -> str:
    if not text:
        return text
    k = rng.randrange(len(text))
    return text[:k] + chr(rng.choice([rng.randrange(32, 127), 0, 9, 10, 0xe9])) + text[k + 1:]


def insert_bytes(text: str, rng: random.Random) -> str:
    k = rng.randrange(len(text) + 1)
    return text[:k] + rng.choice(ODD_VALUES) + text[k:]


def delete_span(text: str, rng: random.Random) -> str:
    if not text:
        return text
    k = rng.randrange(len(text))
    return text[:k] + text[k + rng.randint(1, 16):]


def line_edit(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    k = rng.randrange(len(lines))
    j = rng.randrange(len(lines))
    what = rng.randrange(3)
    if what == 0:
        del lines[k]
    elif what == 1:
        lines.insert(j, lines[k])
    else:
        lines[k], lines[j] = lines[j], lines[k]
    return "\n".join(lines)


# ---- token mutations -------------------------------------------------------------------

def swap_token(text: str, rng: random.Random) -> str:
    toks = list(TOKEN.finditer(text))
    if len(toks) < 2:
        return text
    m = rng.choice(toks)
    pool = rng.randrange(4)
    if pool == 0:
        new = rng.choice(toks).group(0)
    elif pool == 1:
        new = rng.choice(ODD_VALUES)
    elif pool == 2:
        new = rng.choice(ODD_OPCODES)
    else:
        new = rng.choice(ODD_TYPES)
    return text[:m.start()] + new + text[m.end():]


def change_number(text: str, rng: random.Random) -> str:
    nums = list(re.finditer(r"(?<![\w.])\d+(?![\w.])", text))
    if not nums:
        return text
    m = rng.choice(nums)
    v = int(m.group(0))
    new = str(rng.choice([v + 1, v - 1, v * 2, 0, -v, v + 1000, 2 ** 31, 2 ** 40]))
    return text[:m.start()] + new + text[m.end():]


# ---- structural mutations --------------------------------------------------------------

def retarget_call(text: str, rng: random.Random) -> str:
    """Point a called-computation attribute at another computation (often a cycle)."""
    calls = list(CALLED.finditer(text))
    comps = re.findall(r"^(?:ENTRY\s+)?(%?[\w.\-]+)\s*(?:\([^\n]*\)\s*->[^\n]*)?\{\s*$", text,
                       flags=re.M)
    if not calls or not comps:
        return text
    m = rng.choice(calls)
    return text[:m.start(2)] + rng.choice(comps) + text[m.end(2):]


def use_before_definition(text: str, rng: random.Random) -> str:
    """Move an instruction to after its first user, or the last line of its computation."""
    lines = _lines(text)
    idx = [k for k in _one_computation(lines, rng) if "parameter(" not in lines[k]]
    if len(idx) < 2:
        return text
    k = rng.choice(idx)
    later = [j for j in idx if j > k]
    if not later:
        return text
    j = rng.choice(later)
    line = lines.pop(k)
    lines.insert(j, line)
    return "\n".join(lines)


def operand_cycle(text: str, rng: random.Random) -> str:
    """Make an instruction use a later one (a cycle when the later one depends on it)."""
    lines = _lines(text)
    idx = _one_computation(lines, rng)
    if len(idx) < 2:
        return text
    k = rng.choice(idx[:-1])
    j = rng.choice([x for x in idx if x > k])
    later = INSTR.match(lines[j]).group(2)
    m = re.search(r"\(([^()]*)\)", lines[k])
    if not m or not m.group(1).strip() or "parameter(" in lines[k] or "constant(" in lines[k]:
        return text
    ops = [o.strip() for o in m.group(1).split(",")]
    ops[rng.randrange(len(ops))] = later
    lines[k] = lines[k][:m.start(1)] + ", ".join(ops) + lines[k][m.end(1):]
    return "\n".join(lines)


def reshape_dims(text: str, rng: random.Random) -> str:
    """Make one shape unbounded, dynamic, empty or huge."""
    shapes = list(SHAPE.finditer(text))
    if not shapes:
        return text
    m = rng.choice(shapes)
    dims = [d for d in m.group(2).split(",") if d.strip()]
    choice = rng.randrange(4)
    if choice == 0 and dims:
        dims[rng.randrange(len(dims))] = "?"
    elif choice == 1 and dims:
        dims[rng.randrange(len(dims))] = "<=" + str(rng.randint(1, 8))
    elif choice == 2:
        dims = dims + ["0"]
    else:
        dims = [str(rng.choice([100000, 2 ** 20, 2 ** 33]))] + dims
    return text[:m.start(2)] + ",".join(dims) + text[m.end(2):]


def endless_loop(text: str, rng: random.Random) -> str:
    """Turn a loop bound or comparison into one that never ends."""
    dirs = list(re.finditer(r"direction=(LT|LE|GT|GE|EQ)", text))
    if not dirs:
        return swap_token(text, rng)
    m = rng.choice(dirs)
    return text[:m.start(1)] + "NE" + text[m.end(1):]


def duplicate_name(text: str, rng: random.Random) -> str:
    lines = _lines(text)
    idx = _one_computation(lines, rng)
    if len(idx) < 2:
        return text
    a, b = rng.sample(idx, 2)
    name = INSTR.match(lines[a]).group(2)
    mb = INSTR.match(lines[b])
    lines[b] = mb.group(1) + name + mb.group(3) + mb.group(4)
    return "\n".join(lines)


def deep_nesting(text: str, rng: random.Random) -> str:
    """Nest a shape or an operand list hundreds to thousands of levels deep (issue 27: the
    parser's depth limit, and everything that walks a shape after it)."""
    depth = rng.choice([20, 499, 500, 501, 600, 4000, 8000, 8193])
    if rng.randrange(2):
        shapes = list(SHAPE.finditer(text))
        if not shapes:
            return text
        m = rng.choice(shapes)
        return text[:m.start()] + "(" * depth + m.group(0) + ")" * depth + text[m.end():]
    m = re.search(r"\b([a-z][\w\-]*)\((%?[A-Za-z_][\w.\-]*)\)", text)
    if m is None:
        return text
    inner = m.group(2)
    return text[:m.start(2)] + "negate(" * depth + inner + ")" * depth + text[m.end(2):]


def unicode_digit(text: str, rng: random.Random) -> str:
    """Replace an ASCII digit with a digit of another script (Arabic-Indic, fullwidth,
    Devanagari): Python's int() reads them, XLA's lexer does not."""
    digits = [m.start() for m in re.finditer(r"\d", text) if text[m.start()].isascii()]
    if not digits:
        return text
    k = rng.choice(digits)
    base = rng.choice([0x660, 0xFF10, 0x966])
    return text[:k] + chr(base + int(text[k])) + text[k + 1:]


BYTE = [flip_byte, insert_bytes, delete_span, line_edit]
TOKEN_MUTATIONS = [swap_token, change_number, unicode_digit]
STRUCTURAL = [retarget_call, use_before_definition, operand_cycle, reshape_dims,
              endless_loop, duplicate_name, deep_nesting]
FAMILIES = {"byte": BYTE, "token": TOKEN_MUTATIONS, "structural": STRUCTURAL}


def mutate(text: str, rng: random.Random) -> tuple[str, str]:
    """(mutant, description): one to three mutations of one family."""
    family = rng.choice(sorted(FAMILIES))
    names = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        fn = rng.choice(FAMILIES[family])
        text = fn(text, rng)
        names.append(fn.__name__)
    return text, f"{family}:{'+'.join(names)}"
