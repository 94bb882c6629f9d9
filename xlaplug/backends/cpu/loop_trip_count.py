"""How many iterations a `while` will run, when the HLO says so, before it runs.

compiled_while.py compiles a loop from its first iteration when it knows the loop is long
(a compile pays for itself only over many iterations).  Two sources, both exact:

- XLA's optimized HLO carries the count it proved: `backend_config={"known_trip_count":
  {"n":"1000"}, ...}` on the while.
- A counted loop as jax lowers fori_loop and scan: the condition is `i < N` on a state leaf
  `i` (`compare(get-tuple-element(state), constant)`, direction LT, or the mirror `N > i`)
  and the body returns `i + s` for that leaf with a constant step s > 0; the start is the
  leaf's value in the state the loop starts from, so the count is ceil((N - i0) / s).
  (Integer leaves only: a float counter may stop advancing.)
"""
from __future__ import annotations

import json

import numpy as np

from ...hlo.ir import Computation, Instruction


def known_trip_count(ins: Instruction) -> int | None:
    """XLA's `known_trip_count` from the while's backend_config, or None."""
    cfg = ins.attrs.get("backend_config")
    text = getattr(cfg, "text", cfg)
    if not isinstance(text, str) or "known_trip_count" not in text:
        return None
    try:
        n = json.loads(text)["known_trip_count"]["n"]
        return max(int(n), 0)
    except (ValueError, KeyError, TypeError):
        return None


def _scalar_constant(ins: Instruction) -> int | None:
    if ins.opcode != "constant" or ins.shape.rank != 0 or ins.literal is None \
            or not np.issubdtype(np.asarray(ins.literal).dtype, np.integer):
        return None
    return int(np.asarray(ins.literal).reshape(()))


def _leaf(ins: Instruction, comp: Computation) -> int | None:
    """k when `ins` is get-tuple-element(k) of the computation's parameter."""
    if ins.opcode == "get-tuple-element" and ins.operands[0] is comp.parameters[0]:
        return int(ins.attrs["index"])
    return None


def _counter(cond: Computation) -> tuple[int, int] | None:
    """(leaf k, bound N) of a condition `leaf_k < N`, or None."""
    root = cond.root
    if root.opcode != "compare" or len(cond.parameters) != 1:
        return None
    a, b = root.operands
    d = root.attrs.get("direction")
    if str(d) == "GT":
        a, b = b, a
    elif str(d) != "LT":
        return None
    k, n = _leaf(a, cond), _scalar_constant(b)
    return None if k is None or n is None else (k, n)


def _step(body: Computation, k: int) -> int | None:
    """s when the body's root returns `leaf_k + s` (s a positive constant) as leaf k."""
    root = body.root
    if root.opcode != "tuple" or len(body.parameters) != 1 or k >= len(root.operands):
        return None
    nxt = root.operands[k]
    if nxt.opcode != "add":
        return None
    for x, c in (nxt.operands, reversed(nxt.operands)):
        s = _scalar_constant(c)
        if _leaf(x, body) == k and s is not None and s > 0:
            return s
    return None


def counted_trip_count(ins: Instruction, state) -> int | None:
    """ceil((N - i0) / s) for a counted loop (module docstring) starting from `state`."""
    cond, body = ins.attrs["condition"], ins.attrs["body"]
    if not ins.shape.is_tuple:
        return None
    found = _counter(cond)
    if found is None:
        return None
    k, n = found
    s = _step(body, k)
    if s is None or not isinstance(state, tuple) or k >= len(state):
        return None
    i0 = np.asarray(state[k])
    if i0.shape != () or not np.issubdtype(i0.dtype, np.integer):
        return None
    return max(0, -(-(n - int(i0)) // s))


def trip_count(ins: Instruction, state) -> int | None:
    """The loop's iteration count from `state`, when known before it runs; else None."""
    known = known_trip_count(ins)
    return known if known is not None else counted_trip_count(ins, state)


__all__ = ["known_trip_count", "counted_trip_count", "trip_count"]
