"""The element loops of the loop code (loop_codegen.ArrayCodegen): consecutive elementwise
values of one size computed in one loop, each as a scalar the later ones read (stored for
what reads it after the loop): one pass, not one loop per op, which LLVM can vectorize as a
whole.  A loop that reads a view (loop_views.py) runs over rows and columns."""
from __future__ import annotations

import collections
import re

from ...hlo.ir import Instruction
from . import loop_daz, loop_views
from .loop_index import Unsupported


class ElementLoops:
    """The element-loop part of ArrayCodegen (its `names`, `lines`, `buffers`, `_alloc`,
    `_nest`)."""

    def _init_loops(self) -> None:
        # The element loop being built (see _element): size, lines, values held as scalars.
        self._loop_n: int | None = None
        self._loop_lines: list[str] = []
        self._loop_stores: list[str] = []
        self._loop_vars: set[str] = set()
        self._loop_c: int | None = None        # its columns, when it reads a view
        self._view_ids: set[int] = set()        # loop_views.py
        self._views: dict[str, tuple] = {}      # name -> (operand, columns, index, ins)

    def _open(self, n: int) -> None:
        """Continue the element loop over n elements, or end it and start one."""
        if self._loop_n != n:
            self._flush()
            self._loop_n = n

    def _ref(self, o: Instruction, n: int) -> str:
        """Operand `o` as the element loop over n elements reads it at index o (a view at
        its operand's index for the loop's row and column, or copied if the loop already
        reads views of other columns)."""
        size = o.shape.num_elements() if o.shape.is_array else -1
        if size not in (1, n) or id(o) not in self.names:
            raise Unsupported(f"an elementwise operand of another size ('{o.name}')")
        v = self.names[id(o)]
        if v in self._views:
            base, cols, idx, ins = self._views[v]
            if cols is None or self._loop_c in (None, cols):
                self._loop_c = self._loop_c if cols is None else cols
                return f"{base}[{idx}]"
            del self._views[v]
            self._alloc(ins, v)
            self._nest((n // cols, cols), [f"{v}[j0 * {cols} + j1] = "
                                           f"{base}[{idx.replace('r', 'j0').replace('c', 'j1')}]"])
        if size == n and v in self._loop_vars:
            return f"s_{v}"
        return f"{v}[{'o' if size == n else '0'}]"

    def _element(self, ins: Instruction, name: str, expr: str) -> None:
        expr = loop_daz.strip(expr, self.clean)
        if loop_daz.element_clean(self, ins, expr):
            self.clean.add(name)
        self._alloc(ins, name)
        self._loop_lines.append(f"s_{name} = {expr}")
        self._loop_stores.append(f"{name}[o] = s_{name}")
        self._loop_vars.add(name)

    def _flush(self) -> None:
        """The element loop: its values, then their stores (after every load: LLVM would
        load an operand again after a store it cannot tell from it)."""
        c = self._loop_c
        if self._loop_lines and c is not None:  # it reads a view: over rows and columns
            self.lines += [f"for r in range({self._loop_n // c}):", f"    for c in range({c}):",
                           f"        o = r * {c} + c"]
            self.lines += ["        " + ln for ln in self._loop_lines + self._loop_stores]
        elif self._loop_lines:
            self.lines.append(f"for o in range({self._loop_n}):")
            self.lines += ["    " + ln for ln in self._loop_lines + self._loop_stores]
        self._loop_n, self._loop_lines, self._loop_stores, self._loop_vars = None, [], [], set()
        self._loop_c = None

    def _view(self, ins: Instruction, name: str) -> str:
        """A slice or broadcast read in place (loop_views.py): no code, no buffer."""
        base = self.names[id(ins.operands[0])]
        if base in self._loop_vars:
            self._flush()  # its operand's values are stored when that loop ends
        self._views[name] = (base, *loop_views.view_index(ins), ins)
        return name

    def _drop_dead_stores(self, keep: set = frozenset()) -> None:
        """Element-loop values nothing reads after their loop (nor returns, nor `keep`s)
        lose their store and buffer: they live in registers only, as in XLA's fused loops."""
        lines = [ln.strip() for ln in self.lines]
        uses = collections.Counter(re.findall(r"\b\w+\b", "\n".join(lines)))
        dead = {f"{v}[o] = s_{v}" for v in self.buffers
                if uses[v] == 1 and v not in keep} & set(lines)
        self.lines = [ln for ln, st in zip(self.lines, lines) if st not in dead]
        self.buffers = {v: b for v, b in self.buffers.items() if f"{v}[o] = s_{v}" not in dead}

