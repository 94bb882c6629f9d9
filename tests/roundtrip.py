"""Parse -> print -> parse round trips (tests/test_corpus_roundtrip.py, and the conformance
suite's shards, which round-trip every case they run): printing is a fixed point after one
round (p1 == p2), and every instruction of the first parse survives the reparse with the same
name, opcode, shape, operands, attributes (as printed) and constant values."""
from __future__ import annotations

import difflib

import numpy as np

from xlaplug.hlo.text.attributes import format_value
from xlaplug.hlo.text.parser import parse_module
from xlaplug.hlo.text.printer import module_to_text


def _literal_equal(x, y) -> bool:
    if isinstance(x, (tuple, list)) or isinstance(y, (tuple, list)):
        return (isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)) and len(x) == len(y)
                and all(_literal_equal(a, b) for a, b in zip(x, y)))
    if x is None or y is None:
        return x is None and y is None
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    try:
        if not np.array_equal(x, y, equal_nan=True):
            return False
        nan = np.isnan(x)
    except TypeError:  # a dtype without NaN (ints, bool)
        return np.array_equal(x, y)
    try:  # -0.0 == 0.0 for array_equal; the sign must survive too
        return np.array_equal(np.signbit(x[~nan]), np.signbit(y[~nan]))
    except TypeError:  # complex
        return np.array_equal(np.signbit(x.real), np.signbit(y.real)) and \
            np.array_equal(np.signbit(x.imag), np.signbit(y.imag))


def _names(xs) -> list[str]:
    return [x.name for x in xs]


def _instruction_differences(where: str, a, b) -> list[str]:
    out = []

    def check(what, va, vb):
        if va != vb:
            out.append(f"{where}: {what} {va!r} became {vb!r}")

    check("opcode", a.opcode, b.opcode)
    check("shape", str(a.shape), str(b.shape))
    check("operands", _names(a.operands), _names(b.operands))
    check("parameter_number", a.parameter_number, b.parameter_number)
    check("control_predecessors", _names(a.control_predecessors), _names(b.control_predecessors))
    check("attr keys", list(a.attrs), list(b.attrs))
    for k in a.attrs.keys() & b.attrs.keys():
        check(f"attr {k}", format_value(k, a.attrs[k]), format_value(k, b.attrs[k]))
    check("literal_elided", a.literal_elided, b.literal_elided)
    if a.opcode == "constant" and not _literal_equal(a.literal, b.literal):
        out.append(f"{where}: constant value {a.literal!r} became {b.literal!r}")
    return out


def module_differences(a, b) -> list[str]:
    """What of module `a` did not survive into module `b` (empty when everything did)."""
    out = []
    if a.name != b.name:
        out.append(f"module name {a.name!r} became {b.name!r}")
    if a.entry.name != b.entry.name:
        out.append(f"entry {a.entry.name!r} became {b.entry.name!r}")
    if list(a.attrs) != list(b.attrs):
        out.append(f"module attr keys {list(a.attrs)} became {list(b.attrs)}")
    for k in a.attrs.keys() & b.attrs.keys():
        va, vb = format_value(k, a.attrs[k]), format_value(k, b.attrs[k])
        if va != vb:
            out.append(f"module attr {k}: {va!r} became {vb!r}")
    if _names(a.computations) != _names(b.computations):
        out.append(f"computations {_names(a.computations)} became {_names(b.computations)}")
    comps_b = {c.name: c for c in b.computations}
    for ca in a.computations:
        cb = comps_b.get(ca.name)
        if cb is None:
            continue
        if ca.root.name != cb.root.name:
            out.append(f"{ca.name}: root {ca.root.name!r} became {cb.root.name!r}")
        if ca.has_signature != cb.has_signature or ca.execution_thread != cb.execution_thread:
            out.append(f"{ca.name}: signature/execution_thread changed")
        ins_b = {i.name: i for i in cb.instructions}
        if _names(ca.instructions) != _names(cb.instructions):
            lost = [n for n in _names(ca.instructions) if n not in ins_b]
            out.append(f"{ca.name}: instruction order changed; lost {lost}")
        for ia in ca.instructions:
            ib = ins_b.get(ia.name)
            if ib is not None:
                out.extend(_instruction_differences(f"{ca.name}/{ia.name}", ia, ib))
    return out


def roundtrip_problems(text: str, filename: str) -> list[str]:
    """Round-trip `text`; return a description of everything that went wrong."""
    return roundtrip(text, filename)[1]


def roundtrip(text: str, filename: str):
    """(the module `text` parses to, what went wrong in its round trip)."""
    m0 = parse_module(text, filename)
    p1 = module_to_text(m0)
    m1 = parse_module(p1, filename + " (printed once)")
    p2 = module_to_text(m1)
    problems = []
    if p1 != p2:
        diff = difflib.unified_diff(p1.splitlines(), p2.splitlines(), "print 1", "print 2",
                                    lineterm="", n=1)
        problems.append("printing is not a fixed point:\n" + "\n".join(list(diff)[:40]))
    problems.extend(module_differences(m0, m1))
    return m0, problems
