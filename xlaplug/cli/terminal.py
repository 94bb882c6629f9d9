"""What the verbs print on a terminal: one table style for all of them (no vertical rules,
one space of padding) whose cells wrap, never cut, to fit the terminal's width; the console
they print to; and the outputs table of `run`."""
from __future__ import annotations


def table(title: str | None = None, caption: str | None = None):
    """A table whose every column folds what does not fit onto the next line: a long path or
    shape is wrapped, never cut to `...`."""
    from rich import box
    from rich.table import Table

    class FoldingTable(Table):
        def add_column(self, *args, **kwargs):
            kwargs.update(overflow="fold", no_wrap=False)
            super().add_column(*args, **kwargs)

    return FoldingTable(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False,
                        padding=(0, 1), collapse_padding=True)


def console(**kwargs):
    """The console the verbs print to: a terminal's own width (rich reads it); when output
    is not a terminal, $COLUMNS or 80 columns, the tables folding their cells to fit."""
    from rich.console import Console
    return Console(**kwargs)


def first_values(arr, n: int = 3) -> str:
    """The first `n` elements, floats to 6 significant digits (the whole values are in
    `--out` and `--json`), `...` when there are more."""
    from ..hlo import dtypes
    flat = arr.reshape(-1)
    t = dtypes.from_dtype(arr.dtype) if arr.dtype in dtypes._DTYPE_TO_ELEMENT else None
    fmt = (lambda x: f"{float(x):.6g}") if t is not None and dtypes.is_float(t) else str
    text = ", ".join(fmt(x) for x in flat[:n])
    return text + (", ..." if flat.size > n else "")


def print_outputs(outputs, timings) -> None:
    """`xlaplug run`'s table of outputs (name, type, shape, min, max, mean, first values)
    and its timing line."""
    from ..runtime.outputs import summarize
    t = table("outputs")
    for h in ("name", "dtype", "shape", "min", "max", "mean", "first values"):
        t.add_column(h, justify="right" if h in ("min", "max", "mean") else "left")
    for k, v in enumerate(outputs):
        s = summarize(v)
        fmt = lambda x: f"{x:.6g}" if isinstance(x, float) else "-"  # noqa: E731
        t.add_row(f"out{k}", s["dtype"], str(tuple(s["shape"])), fmt(s.get("min")),
                  fmt(s.get("max")), fmt(s.get("mean")),
                  first_values(v) if v.size and v.dtype.kind != "V" else "-")
    out = console(soft_wrap=True)
    out.print(t)
    out.print(f"parse {timings['parse_s'] * 1e3:.1f} ms, compile "
              f"{timings['compile_s'] * 1e3:.1f} ms, run {timings['run_s'] * 1e3:.1f} ms "
              f"(median)", highlight=False)
