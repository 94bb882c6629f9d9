"""Progress bars for long work (check-plugins, the conformance runner, `run --repeat`).

The runtime only reports progress -- a callback `progress(done, total)` handed to it -- and
this module draws it: a rich bar on standard error when that is a terminal, nothing at all
otherwise (a pipe, a file, CI), so that captured output holds only the results.  The bar
is transient (it goes away when the work ends) and appears only once the work has taken
`delay_s`, so quick work never flashes one.
"""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

Progress = Callable[[int, int], None]


def _ignore(done: int, total: int) -> None:
    """The callback where nothing is drawn."""


@contextlib.contextmanager
def progress_bar(description: str, *, console=None, delay_s: float = 0.0,
                 clock=time.perf_counter) -> Iterator[Progress]:
    """A `progress(done, total)` callback drawing a bar on `console` (default: standard
    error) while the block runs; when `console` is not a terminal, a callback that does
    nothing.  `delay_s`: no bar until the work has run this long (and is not done)."""
    from rich.console import Console
    console = console if console is not None else Console(stderr=True)
    if not console.is_terminal:
        yield _ignore
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)
    bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
              TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)
    start = clock()
    task = None

    def progress(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            if done >= total or clock() - start < delay_s:
                return
            bar.start()
            task = bar.add_task(description, total=total)
        bar.update(task, completed=done, total=total)

    try:
        yield progress
    finally:
        if task is not None:
            bar.stop()
