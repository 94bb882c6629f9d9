"""The signatures a compiled handler serves: those an @njit kernel has, and those of its
`examples=` (the shapes and attributes check-plugins tries it on).

An example's operand shapes, the results its shape rule declares and its attributes'
numba types make one signature with C-contiguous arrays -- what XLA's buffers are -- and
the kernel is compiled for it at registration (numba's cache makes that quick the second
time).  So a plugin author writes a plain lazy `@njit` kernel and its examples; calls of
other dtypes or ranks go through the Python handler.
"""
from __future__ import annotations

import inspect

from numba import from_dtype, typeof, types

from ...hlo.errors import HloError
from ...hlo.ir import Shape
from ...hlo.text.shape_parser import parse_shape
from ...plugin.api import bind_call
from ...plugin.rules import shape_rule_kwargs


def _leaves(shape) -> list[Shape]:
    shape = shape if isinstance(shape, Shape) else Shape.tuple_of(shape)
    return list(shape.leaves())


def _array(shape: Shape):
    return types.Array(from_dtype(shape.dtype), len(shape.dims), "C")


def example_signature(op: str, kernel, shape_rule, example) -> tuple:
    """The numba argument types of the kernel for one example."""
    shapes_txt, attrs = example
    operands = [parse_shape(s) for s in shapes_txt]
    what = f"plugin '{shape_rule.plugin.name}' shape rule for '{op}'"
    results = _leaves(bind_call(shape_rule.fn, what, operands,
                                shape_rule_kwargs(shape_rule.fn, dict(attrs), 1)))
    buffers = [_array(s) for s in operands + results]
    params = list(inspect.signature(kernel.py_func).parameters.values())[len(buffers):]
    rest = []
    for p in params:
        if p.name in attrs:
            rest.append(typeof(attrs[p.name]))
        elif p.default is not inspect.Parameter.empty:
            rest.append(typeof(p.default))
        else:
            raise HloError(f"example {shapes_txt} gives no attribute '{p.name}'")
    return tuple(buffers + rest)


def compile_examples(op: str, kentry, shape_rule) -> str | None:
    """Compile the kernel for each of its examples; None, or why one could not be."""
    if shape_rule is None or not kentry.examples:
        return None
    kernel = kentry.fn
    for example in kentry.examples:
        try:
            sig = example_signature(op, kernel, shape_rule, example)
            if sig not in kernel.overloads:
                kernel.compile(sig)
        except Exception as e:  # a typing error names what numba could not compile
            return (f"numba could not compile it for example {list(example[0])}: "
                    f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return None
