"""A traced graph's sizes as ints at given sizes of its dynamic axes (the peak memory of a
call, a kernel's grid at the top of the axes' ranges)."""

from __future__ import annotations

import math

import sympy

from ..runtime.manifest import ITEMSIZE
from . import graph as g


class Sizes:
    """Sizes of a traced graph's tensors as ints, the dynamic axes at ``values`` (name -> size):
    a size is an int, an axis's name or an expression of them, or a ``Ref`` to a ``Scalar``."""

    def __init__(self, graph: g.Graph, values: dict[str, int]):
        self.specs, self.values, self.scalars = {i.name: i.spec for i in graph.inputs} | graph.spec, values, {}
        self.symbols = {name: sympy.Symbol(name) for name in values}
        for op in graph.ops:
            if isinstance(op, g.Scalar):
                self.scalars[op.out] = self._scalar(op)

    def __call__(self, size) -> int:
        if isinstance(size, int):
            return size
        if isinstance(size, g.Ref):
            return self.scalars[size.name]
        expr = sympy.sympify(size, locals=self.symbols)
        return int(expr.subs({self.symbols[n]: v for n, v in self.values.items()}))

    def _scalar(self, op: g.Scalar) -> int:
        args = [self(a) if isinstance(a, g.Ref) and a.name in self.scalars else a for a in op.args]
        if op.fn == "size":
            return self(self.specs[op.args[0].name].shape[op.args[1]])
        functions = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
                     "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "pow": lambda a, b: a ** b,
                     "neg": lambda a: -a, "max": max, "min": min, "sum": lambda *a: sum(a)}
        return functions[op.fn](*args)

    def nbytes(self, spec: g.TensorSpec) -> int:
        shape = [self(n) for n in spec.shape]
        if any(n == 0 for n in shape):
            return 0
        extent = sum((n - 1) * self(st) for n, st in zip(shape, spec.stride)) + 1
        return max(extent, math.prod(shape)) * ITEMSIZE.get(spec.dtype, 1)


def at_most(graph: g.Graph):
    """``Sizes`` of ``graph`` with every dynamic axis at the top of its range (sizes grow with
    the axes: the most any one may be)."""
    return Sizes(graph, {name: high for name, (_, high) in graph.dynamic.ranges.items()} if graph.dynamic else {})
