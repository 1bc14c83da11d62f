"""The buffers' lifetimes in a call: each allocation and view made right before the op that
first uses it (``late_allocations``), each name the program holds released after its last use
(``releases``), so that torch's caching allocator, and a CUDA graph's memory pool, hand a dead
buffer's memory to the next one. A call then needs the largest set of buffers live at once
(``peak_bytes``), not the sum of all of them: every buffer of every layer, as when the
allocations all came first and lived to the end."""

from __future__ import annotations

from .. import graph as g
from ..sizes import Sizes
from .combos import ComboLaunch


def uses(op) -> list[str]:
    """The values an op of the plan reads (its arguments, a view's base, sizes)."""
    if isinstance(op, ComboLaunch):
        return [a.name for a in op.args]
    if isinstance(op, (g.Alloc, g.View)):
        spec = op.spec
        return ([op.base] if isinstance(op, g.View) else []) + g.refs_in((spec.shape, spec.stride,
                                                                          spec.storage_offset))
    if isinstance(op, g.Extern):
        return g.refs_in(op.args) + g.refs_in([v for _, v in op.kwargs])
    if isinstance(op, g.GetItem):
        return [op.base]
    if isinstance(op, g.Scalar):
        return g.refs_in(op.args)
    raise TypeError(op)


def late_allocations(ops: list, levels: list[int]) -> tuple[list, list[int]]:
    """``ops`` with each allocation and view moved to right before its first user (an unused one
    to the end); the others keep their order. Both are host-side bookkeeping, bound by nothing
    but their sizes and base, which come before their first user already."""
    pending: dict[str, int] = {}  # value -> index in ops of the allocation or view making it
    for i, op in enumerate(ops):
        if isinstance(op, (g.Alloc, g.View)):
            pending[op.out] = i
    order: list[int] = []

    def place(name: str) -> None:
        i = pending.pop(name, None)
        if i is None:
            return
        for needed in uses(ops[i]):
            place(needed)
        order.append(i)

    for i, op in enumerate(ops):
        if isinstance(op, (g.Alloc, g.View)):
            continue
        for name in uses(op):
            place(name)
        order.append(i)
    for name in list(pending):
        place(name)
    return [ops[i] for i in order], [levels[i] for i in order]


def releases(ops: list, keep: set[str], roots: dict[str, str | None] | None = None) -> list[tuple[str, ...]]:
    """For each op, the names the program made that are dead after it (used last there, or never
    used), but those in ``keep`` (outputs) and sizes (ints). ``roots``: the value each view's
    line reads besides its base (``codegen.program.view_roots``)."""
    made = {op.out: i for i, op in enumerate(ops)
            if getattr(op, "out", None) is not None and not isinstance(op, g.Scalar)}
    last = dict(made)
    roots = roots or {}
    for i, op in enumerate(ops):
        for name in uses(op) + ([roots[op.out]] if isinstance(op, g.View) and roots.get(op.out) else []):
            if name in made:
                last[name] = i
    dead: list[list[str]] = [[] for _ in ops]
    for name, i in last.items():
        if name not in keep:
            dead[i].append(name)
    return [tuple(names) for names in dead]


def peak_bytes(graph: g.Graph, ops: list, keep: set[str], values: dict[str, int] | None = None) -> int:
    """The most bytes the buffers a call makes (allocations, the new tensors torch's ops return)
    hold at once, the dynamic axes at ``values``; ``keep``: the outputs, alive to the end."""
    sizes = Sizes(graph, values or {})
    storage: dict[str, str] = {}  # value -> the value whose storage it is (buffers made here only)
    born: dict[str, tuple[int, int]] = {}  # storage -> (op index, bytes)
    end: dict[str, int] = {}
    specs = graph.spec
    for i, op in enumerate(ops):
        new = isinstance(op, g.Alloc) or isinstance(op, (g.Extern, g.GetItem)) and op.out in specs and not (
            isinstance(op, g.Extern) and (op.aliases or op.writes))
        if new:
            spec = op.spec if isinstance(op, g.Alloc) else specs[op.out]
            storage[op.out], born[op.out] = op.out, (i, sizes.nbytes(spec))
        elif isinstance(op, g.View) and op.base in storage:
            storage[op.out] = storage[op.base]
        for name in uses(op) + [getattr(op, "out", None)]:
            if name in storage:
                end[storage[name]] = i
    for name in keep:
        if name in storage:
            end[storage[name]] = len(ops)
    change = [0] * (len(ops) + 2)
    for root, (start, nbytes) in born.items():
        change[start] += nbytes
        change[end.get(root, start) + 1] -= nbytes
    live = peak = 0
    for delta in change:
        live += delta
        peak = max(peak, live)
    return peak
