"""The dependency graph of a program's ops on *storage*: what each op reads and writes
(a view writes what its base holds), which ops each must follow (read after write, write
after read or write, where the bytes overlap), and each op's ASAP level."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ...runtime.manifest import ITEMSIZE
from .. import graph as g

def reads_writes(op, graph: g.Graph) -> tuple[list[str], list[str]]:
    """Values an op reads and writes (before resolving views to storage)."""
    if isinstance(op, g.Launch):
        kernel = graph.kernel(op.kernel)
        reads, writes = [], []
        for param, _, arg in kernel.bind(op.args):
            if not isinstance(arg, g.Ref):
                continue
            written = param.startswith(("out_ptr", "in_out_ptr")) or param in kernel.mutated
            (writes if written else reads).append(arg.name)
            if param.startswith("in_out_ptr"):
                reads.append(arg.name)
        return reads, writes
    if isinstance(op, g.Extern):
        refs = g.refs_in(op.args) + g.refs_in([v for _, v in op.kwargs])
        return refs, list(op.writes) + ([op.out] if op.out else [])
    if isinstance(op, g.View):  # an alias of its base's storage: it touches no data
        return [], []
    if isinstance(op, g.GetItem):
        return [op.base], [op.out]
    if isinstance(op, g.Alloc):
        return g.refs_in((op.spec.shape, op.spec.stride)), [op.out]
    if isinstance(op, g.Scalar):
        return g.refs_in(op.args), [op.out]
    raise TypeError(op)


def storage_roots(graph: g.Graph) -> dict[str, str]:
    """Map every value to the value that owns its storage."""
    root: dict[str, str] = {i.name: i.name for i in graph.inputs}
    for op in graph.ops:
        if isinstance(op, g.View):
            root[op.out] = root.get(op.base, op.base)
        elif isinstance(op, g.Extern) and op.out:
            root[op.out] = root.get(op.aliases[0], op.aliases[0]) if op.aliases else op.out
        elif isinstance(op, (g.Alloc, g.GetItem, g.Scalar)):
            root[op.out] = op.out
    return root


@dataclass(frozen=True)
class Footprint:
    """Where a view's elements lie in its storage: the bytes ``[start, end)``, and, when every
    stride but a unit one is a multiple of ``pitch`` bytes, the bytes ``[first, last)`` of each
    pitch-long row it touches (a column block of a ``torch.cat`` buffer); else ``pitch`` 0."""

    start: int
    end: int
    pitch: int = 0
    first: int = 0
    last: int = 0

    def overlaps(self, other: Footprint) -> bool:
        if self.end <= other.start or other.end <= self.start:
            return False
        if self.pitch and self.pitch == other.pitch:
            return self.first < other.last and other.first < self.last
        return True


def footprints(graph: g.Graph) -> dict[str, Footprint]:
    """The footprint of each view whose shape, strides and offset are numbers (a dynamic
    batch's are not: such a view covers its whole storage)."""
    found = {}
    for op in graph.ops:
        if not isinstance(op, g.View):
            continue
        spec = op.spec
        size = ITEMSIZE.get(spec.dtype)
        if size is None or not all(isinstance(n, int) for n in (*spec.shape, *spec.stride, spec.storage_offset)):
            continue
        if any(n == 0 for n in spec.shape):
            found[op.out] = Footprint(0, 0)
            continue
        start = spec.storage_offset * size
        end = start + (sum((n - 1) * st for n, st in zip(spec.shape, spec.stride)) + 1) * size
        rows = [st for n, st in zip(spec.shape, spec.stride) if n > 1 and st != 1]
        inner = [n for n, st in zip(spec.shape, spec.stride) if n > 1 and st == 1]
        pitch = min(rows) if rows else 0
        if pitch and len(inner) <= 1 and all(st % pitch == 0 for st in rows):
            width = inner[0] if inner else 1
            first = spec.storage_offset % pitch
            if first + width <= pitch:
                found[op.out] = Footprint(start, end, pitch * size, first * size, (first + width) * size)
                continue
        found[op.out] = Footprint(start, end)
    return found


def dependencies(graph: g.Graph) -> list[set[int]]:
    """For each op, the indices of the ops it must follow (RAW, WAR, WAW on storage). Two
    accesses through views of one storage whose bytes do not overlap (the slices of a
    ``torch.cat`` or ``stack`` buffer each kernel writes) do not order each other."""
    root, ranges = storage_roots(graph), footprints(graph)
    writers: dict[str, list] = defaultdict(list)  # root -> [(Footprint, or None: all of it; op index)]
    readers: dict[str, list] = defaultdict(list)
    deps: list[set[int]] = []

    def overlapping(accesses, span):
        return [i for other, i in accesses if span is None or other is None or span.overlaps(other)]

    defined: dict[str, int] = {}  # name -> the op that makes it (an allocation, view, extern output)
    for i, op in enumerate(graph.ops):
        reads, writes = reads_writes(op, graph)
        used = [op.base] if isinstance(op, (g.View, g.GetItem)) else reads + writes
        mine: set[int] = {defined[name] for name in used if name in defined}
        for name in reads:
            mine.update(overlapping(writers[root.get(name, name)], ranges.get(name)))
        for name in writes:
            r, span = root.get(name, name), ranges.get(name)
            mine.update(overlapping(writers[r], span))
            mine.update(overlapping(readers[r], span))
        for name in reads:
            readers[root.get(name, name)].append((ranges.get(name), i))
        for name in writes:
            r, span = root.get(name, name), ranges.get(name)
            if span is None:  # the whole storage: it orders everything after it
                writers[r], readers[r] = [], []
            writers[r].append((span, i))
        out = getattr(op, "out", None)
        if out is not None:
            defined[out] = i
        mine.discard(i)
        deps.append(mine)
    return deps


def levels(deps: list[set[int]], costs: list[int] | None = None) -> list[int]:
    """Each op's level: the longest path to it from the inputs, where an edge out of op ``d``
    weighs ``costs[d]`` (default 1). Two ops whose levels are equal have no path between
    them through an edge of weight 1."""
    level: list[int] = []
    for mine in deps:
        level.append(max((level[d] + (1 if costs is None else costs[d]) for d in mine), default=0))
    return level


def device_costs(graph: g.Graph) -> list[int]:
    """1 for the ops that run on the device (kernel launches, extern calls), 0 for host-side
    bookkeeping (allocations, views, getitems, sizes of a dynamic batch)."""
    return [1 if isinstance(op, (g.Launch, g.Extern)) else 0 for op in graph.ops]


def graph_levels(graph: g.Graph) -> list[int]:
    """The levels the plan combines by: only device ops count along a path, so a kernel
    whose buffer is allocated from a dynamic batch's size (``Scalar`` -> ``Alloc`` -> launch)
    lands on the same level as one whose buffer is static. Host ops cost nothing on the GPU,
    so this is the ASAP schedule of the device work; any two launches on one level still have
    no dependency path between them, since every path leaving a launch costs 1."""
    return levels(dependencies(graph), device_costs(graph))


