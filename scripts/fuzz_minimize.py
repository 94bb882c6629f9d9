"""Delta debugging for scripts/fuzz.py: the smallest text that still fails the same way.

`minimize(text, fails, budget_s)` runs Zeller's ddmin over the lines of `text`, then over the
characters of what is left: it removes ever smaller chunks (first halves, then quarters, ...)
while `fails(candidate)` stays true, and stops at a text where no single unit can go, or when
the time budget is spent (the best text so far is the answer).  `fails` runs a process per
call in the fuzzer, so the chunks are tried largest first and every answer is memoized.
"""
from __future__ import annotations

import time


def ddmin(units: list[str], fails, deadline: float) -> list[str]:
    """A 1-minimal sublist of `units` (in order) for which `fails("".join(...))` holds,
    as far as the deadline lets it get."""
    seen: dict[str, bool] = {}

    def test(candidate: list[str]) -> bool:
        text = "".join(candidate)
        if text not in seen:
            seen[text] = fails(text)
        return seen[text]

    n = 2
    while len(units) >= 2 and time.monotonic() < deadline:
        size = -(-len(units) // n)  # ceil
        chunks = [(i, min(i + size, len(units))) for i in range(0, len(units), size)]
        for lo, hi in chunks:  # the text without one chunk
            if time.monotonic() >= deadline:
                return units
            rest = units[:lo] + units[hi:]
            if rest and test(rest):
                units = rest
                n = max(n - 1, 2)
                break
        else:
            if n >= len(units):
                break
            n = min(len(units), 2 * n)
    return units


def minimize(text: str, fails, budget_s: float = 300.0) -> str:
    """The smallest text found that still `fails`; `text` itself when nothing smaller does
    (or it no longer fails at all: a flaky finding is kept whole)."""
    deadline = time.monotonic() + budget_s
    if not fails(text):
        return text
    lines = ddmin(text.splitlines(keepends=True), fails, deadline)
    return "".join(ddmin(list("".join(lines)), fails, deadline))
