"""Value parsers for the basic kinds: integers, floats, booleans, names, enumerations,
strings, lists of those, and references to computations and instructions (resolved later
by the parser)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .attr_text import (_INT, _NAME, _STRING, AttrError, _braced_body, _int, _short, split_top,
                        split_top_at, unquote)
from ..attr_types import Word


@dataclass
class CompRef:
    """A computation named before the module is fully read; resolved by the parser."""
    name: str
    offset: int = 0


@dataclass
class InstrRef:
    name: str
    offset: int = 0


def p_int(t: str) -> int:
    return _int(t)


def p_float(t: str) -> float:
    try:
        return float(t)
    except ValueError:
        raise AttrError(f"expected a number, got '{_short(t)}'") from None


def p_bool(t: str) -> bool:
    if t == "true":
        return True
    if t == "false":
        return False
    raise AttrError(f"expected true or false, got '{_short(t)}'")


def p_word(t: str) -> Word:
    if not re.fullmatch(r"[A-Za-z_][\w.\-]*", t):
        raise AttrError(f"expected a name, got '{_short(t)}'")
    return Word(t)


# Enumerations XLA's parser checks by name (the spelling it prints).
ENUMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "direction": ("a comparison direction", ("EQ", "NE", "GE", "GT", "LE", "LT")),
    "type": ("a comparison type", ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")),
    "fft_type": ("an FFT type", ("FFT", "IFFT", "RFFT", "IRFFT")),
    "distribution": ("a random distribution", ("rng_uniform", "rng_normal")),
    "kind": ("a fusion kind", ("kLoop", "kInput", "kOutput", "kCustom")),
    "transpose_a": ("a transpose option", ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT",
                                           "TRANSPOSE_INVALID")),
    "api_version": ("a custom-call API version", (
        "API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING",
        "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI")),
    "schedule": ("a custom-call schedule", ("SCHEDULE_NONE", "SCHEDULE_LATEST",
                                            "SCHEDULE_EARLIEST")),
    "custom_call_schedule": ("a custom-call schedule", ("SCHEDULE_NONE", "SCHEDULE_LATEST",
                                                        "SCHEDULE_EARLIEST")),
    "padding_type": ("a padding type", ("PADDING_INVALID", "PADDING_VALID", "PADDING_SAME")),
    "conv_kind": ("a convolution kind", ("fprop", "wgrad", "dgrad", "unset")),
}
_PRECISIONS = ("default", "high", "highest", "packed_nibble")


def _enum_parser(name: str) -> Callable[[str], Word]:
    what, values = ENUMS[name]
    allowed = frozenset(values)

    def parse(t: str) -> Word:
        if t not in allowed:
            raise AttrError(f"expected {what} ({', '.join(values)}), got '{_short(t)}'")
        return Word(t)
    return parse


def p_string(t: str) -> str:
    if not re.fullmatch(_STRING, t, re.S):
        if t.startswith('"'):
            raise AttrError("unterminated string literal")
        raise AttrError(f"expected a quoted string, got '{_short(t)}'")
    return unquote(t)


def p_int_list(t: str) -> tuple[int, ...]:
    body = _braced_body(t, "an integer list")
    if not body:
        return ()
    out = []
    for part, off in split_top_at(t.strip()[1:-1]):
        if not _INT.fullmatch(part):
            raise AttrError(f"expected an integer list like {{0,1}}, found '{_short(part)}'",
                            1 + off)
        out.append(int(part))
    return tuple(out)


def p_int_list_or_lists(t: str):
    """`{1,2}` or `{{1,2},{3,4}}` (slice_sizes: gather vs. combined collective-permute)."""
    body = _braced_body(t, "an integer list")
    if body.startswith("{"):
        return tuple(p_int_list(g) for g in split_top(body))
    return p_int_list(t)


def p_bool_list(t: str) -> tuple[bool, ...]:
    body = _braced_body(t, "a list of true/false")
    return tuple(p_bool(x.strip()) for x in body.split(",")) if body else ()


def p_bool_or_list(t: str):
    """`true` or `{true,false}` (allow_spmd_sharding_propagation_to_*)."""
    return p_bool_list(t) if t.strip().startswith("{") else p_bool(t)


def p_word_list(t: str) -> tuple[Word, ...]:
    body = _braced_body(t, "a list of names")
    return tuple(p_word(x.strip()) for x in body.split(",")) if body else ()


def p_precision_list(t: str) -> tuple[Word, ...]:
    words = p_word_list(t)
    for w in words:
        if w.lower() not in _PRECISIONS:
            raise AttrError(f"expected operand precisions ({', '.join(_PRECISIONS)}), got "
                            f"'{_short(w)}'")
    return words


def p_comp(t: str) -> CompRef:
    name = t.strip()
    if not _NAME.fullmatch(name):
        raise AttrError(f"expected a computation name, got '{_short(name)}'")
    return CompRef(name.lstrip("%"), len(t) - len(t.lstrip()))


def p_comps(t: str) -> list[CompRef]:
    """`name` or `{name, name}`; each reference's offset is where its name starts."""
    s = t.strip()
    if s.startswith("{"):
        _braced_body(s, "computations")
        out = []
        for part, off in split_top_at(s[1:-1]):
            if not _NAME.fullmatch(part):
                raise AttrError(f"expected a computation name, got '{_short(part)}'", 1 + off)
            out.append(CompRef(part.lstrip("%"), 1 + off))
        if not out:
            raise AttrError("expected at least one computation name in braces")
        return out
    return [p_comp(t)]


def p_instrs(t: str) -> list[InstrRef]:
    t = t.strip()
    _braced_body(t, "instruction names")
    out = []
    for part, off in split_top_at(t[1:-1]):
        if not _NAME.fullmatch(part):
            raise AttrError(f"expected an instruction name, got '{_short(part)}'", 1 + off)
        out.append(InstrRef(part.lstrip("%"), 1 + off))
    return out
