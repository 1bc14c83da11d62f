"""Work on the weights alone, moved from every call to the load.

Inductor writes kernels whose inputs are weights only: a convolution weight copied to
channels-last, a weight cast to the activations' dtype, padded, transposed, or linears'
weights concatenated. At every call they compute the same bytes again. ``split`` finds
them (and the allocations, views and extern calls they need): the program's ``prepare``
runs them once, when the package loads, and forward reads their results as weights.

An op runs at load when everything it reads is a weight the program never updates (or a
result of such an op), its results are buffers of its own that no per-call op writes,
and it draws no random numbers and talks to no other process. What forward still reads of
the weights, and the results it reads, are its weights (``Split.forward_weights``). The
results stay on the GPU beside the weights (``Split.held_bytes``, per input shape).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...runtime.manifest import ITEMSIZE
from .. import graph as g
from .dependencies import reads_writes, storage_roots

# Extern calls that read no tensor and always make the same one (others: random, or unknown).
_CONSTANT_FACTORIES = ("aten::full", "aten::arange", "aten::zeros", "aten::ones", "aten::scalar_tensor")
_RANDOM = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial", "exponential", "cauchy",
           "geometric", "log_normal", "seed", "randperm")


@dataclass(frozen=True)
class Split:
    """Which of a graph's ops run at load (``at_load``, indices into ``graph.ops``), and the
    weights forward takes: the graph's weights it still reads, then the values ``prepare``
    made that it reads (``prepared``)."""

    at_load: frozenset[int]
    forward_weights: tuple[str, ...]
    prepared: tuple[str, ...]
    held_bytes: int  # the bytes of the buffers made at load that forward reads (kept on the GPU)


def _may_run_at_load(op) -> bool:
    if isinstance(op, (g.Launch, g.View, g.GetItem, g.Alloc)):
        return True
    if isinstance(op, g.Extern):
        if g.is_collective(op) or any(word in op.op.lower() for word in _RANDOM):
            return False
        return True
    return False  # a Scalar: a size of the inputs


def _refs(op) -> set[str]:
    """Names of every ``Ref`` an op reads, its spec's sizes and strides too."""
    fields = [getattr(op, f.name) for f in dataclasses.fields(op)]
    return set(g.refs_in([[f.shape, f.stride, f.storage_offset] if isinstance(f, g.TensorSpec) else f
                          for f in fields]))


def _bytes(spec: g.TensorSpec) -> int:
    if not all(isinstance(n, int) for n in (*spec.shape, *spec.stride)):
        return 0
    if any(n == 0 for n in spec.shape):
        return 0
    return (sum((n - 1) * s for n, s in zip(spec.shape, spec.stride)) + 1) * ITEMSIZE.get(spec.dtype, 4)


def split(graph: g.Graph) -> Split:
    """The ops of ``graph`` that depend on its constant weights alone, and what forward reads."""
    root = storage_roots(graph)
    ops = graph.ops
    accesses = [reads_writes(op, graph) for op in ops]
    written = {root.get(n, n) for _, writes in accesses for n in writes}
    constant = {i.name for i in graph.inputs if i.kind == "weight" and i.key not in graph.state
                and i.name not in written}
    # Storages a result may live in: made by the program, neither returned nor copied into an input.
    returned = {root.get(n, n) for n in (*graph.outputs, *(name for name, _ in graph.mutations)) if n is not None}
    fresh = {op.out for op in ops if isinstance(op, (g.Alloc, g.GetItem))
             or (isinstance(op, g.Extern) and op.out and not op.aliases)} - returned
    while True:  # fresh shrinks at every turn
        chosen = _grow(ops, accesses, root, constant, fresh)
        spoiled = _spoiled(ops, accesses, root, chosen)
        if not spoiled & fresh:
            return _finish(graph, chosen, root, constant)
        fresh -= spoiled


def _grow(ops, accesses, root, constant: set[str], fresh: set[str]) -> set[int]:
    """In program order, every op whose reads are constant or made by an op chosen before it,
    and whose writes go to ``fresh`` storages."""
    derived, chosen = set(constant), set()
    sizes = {op.out for op in ops if isinstance(op, g.Scalar)}  # sizes of each call's inputs
    for i, op in enumerate(ops):
        if not _may_run_at_load(op) or _refs(op) & sizes:  # (a view over the dynamic batch: per call)
            continue
        reads, writes = accesses[i]
        if isinstance(op, g.View):
            ok = root.get(op.base, op.base) in derived
        elif isinstance(op, g.Alloc):
            ok = not reads and op.out in fresh
        elif isinstance(op, g.Extern) and not reads:
            ok = op.op.split(".")[0] in _CONSTANT_FACTORIES and all(root.get(w, w) in fresh for w in writes)
        else:
            ok = all(root.get(r, r) in derived for r in reads) and all(root.get(w, w) in fresh for w in writes)
        if ok:
            chosen.add(i)
            derived.update(root.get(w, w) for w in writes)
            if getattr(op, "out", None):
                derived.add(root.get(op.out, op.out))
    return chosen


def _spoiled(ops, accesses, root, chosen: set[int]) -> set[str]:
    """Storages an op at load writes that forward writes too, reads before the load's last
    write, or that the load did not allocate itself."""
    allocated = {op.out for i, op in enumerate(ops) if i in chosen and isinstance(op, g.Alloc)}
    made = {op.out for i, op in enumerate(ops) if i in chosen and isinstance(op, (g.Extern, g.GetItem)) and op.out}
    last_write: dict[str, int] = {}
    for i in chosen:
        for w in accesses[i][1]:
            last_write[root.get(w, w)] = i
    spoiled = {r for r in last_write if r not in allocated and r not in made}
    for i, op in enumerate(ops):
        if i in chosen:
            continue
        reads, writes = accesses[i]
        spoiled.update(r for r in (root.get(w, w) for w in writes) if r in last_write)
        spoiled.update(r for r in (root.get(n, n) for n in reads) if last_write.get(r, -1) > i)
    return spoiled


def _finish(graph: g.Graph, chosen: set[int], root: dict, constant: set[str]) -> Split:
    """Which values forward reads of the weights and of ``prepare``'s results."""
    ops = graph.ops
    if not any(isinstance(ops[i], (g.Launch, g.Extern)) for i in chosen):
        weights = tuple(i.name for i in graph.inputs if i.kind == "weight")
        return Split(frozenset(), weights, (), 0)
    made_at_load = {op.out for i, op in enumerate(ops) if i in chosen and getattr(op, "out", None)}
    used: list[str] = []
    for i, op in enumerate(ops):
        if i in chosen:
            continue
        reads, writes = reads_writes(op, graph)
        names = [op.base] if isinstance(op, (g.View, g.GetItem)) else [*reads, *writes]
        if isinstance(op, (g.Alloc, g.Scalar)):
            names = g.refs_in((op.spec.shape, op.spec.stride)) if isinstance(op, g.Alloc) else g.refs_in(op.args)
        used.extend(names)
    used.extend(n for n in graph.outputs if n is not None)
    used.extend(name for name, _ in graph.mutations)
    used_set = set(used)
    weight_names = [i.name for i in graph.inputs if i.kind == "weight"]
    state = {i.name for i in graph.inputs if i.kind == "weight" and i.key in graph.state}
    kept = tuple(n for n in weight_names if n in used_set or n in state)
    prepared = tuple(dict.fromkeys(n for n in used if n in made_at_load))
    spec = graph.spec
    held_roots = {root.get(n, n) for n in prepared} - constant  # a view of a weight holds nothing new
    held = sum(_bytes(spec[r]) for r in held_roots if r in spec)
    return Split(frozenset(chosen), kept + prepared, prepared, held)
