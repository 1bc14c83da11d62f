"""The trace stage, through the build cache: ``entry.trace_model`` or a cached trace that fits.

Tracing (torch.export + Inductor) takes seconds per arch and dominates a rebuild, so
its result is cached under ``cache.trace_keys``, as plain data (``plain``): the weights
themselves always come from the model being built, and a cached graph is used only when
its inputs and weights still match the model's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ...runtime.inputs import at_sizes
from ...runtime.manifest import Dynamic
from .. import graph as g
from .plain import entry_of, weights_of


@dataclass
class Traced:
    graph: g.Graph
    weights: dict  # weight name -> the model's tensor
    structure: tuple  # the nesting of the outputs (to_graph.output_structure)
    cached: bool  # came from the build cache


def _from_beside(child, missing: list, model, reporter, cache, found: dict) -> list:
    """The traces of ``missing`` that ``trace_beside``'s child made, into ``found`` (and the
    cache); returns those it did not make (its failure noted: they are traced here). The child is
    waited for up to ``forked.wait_seconds`` of the time since it started."""
    from . import forked

    if not missing:  # all found in the cache meanwhile
        child.stop()
        return []
    label = missing[0][2]
    with reporter.stage(f"trace for {label}, made meanwhile in a second process", timing_key="trace"):
        made, why = child.result(forked.wait_seconds(time.monotonic() - child.started))
    if made is None:
        reporter.detail(f"{label}: the process tracing it beside this one failed ({why}); tracing it here")
        return missing
    left = []
    for max_tokens, key, named in missing:
        entry = made.get(max_tokens)
        weights = weights_of(model, entry["graph"], entry["constants"]) if entry else None
        if weights is None:
            left.append((max_tokens, key, named))
            continue
        if key is not None:
            cache.put_trace(key, entry)
        found[max_tokens] = Traced(entry["graph"], weights, entry["structure"], cached=False)
    return left


def _fits(graph, inputs, weights) -> bool:
    """A cached graph's inputs still describe the model's (a second look past the key)."""
    user = sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)
    if len(user) != len(inputs):
        return False
    for i, t in zip(user, inputs):
        sizes = {traced: d for d, traced in zip(t.shape, i.spec.shape) if isinstance(traced, str)}
        if len(t.shape) != len(i.spec.shape):
            return False
        if (tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch.")) != (
                at_sizes(i.spec.shape, sizes), at_sizes(i.spec.stride, sizes), i.spec.dtype):
            return False
    for i in graph.inputs:
        if i.kind == "weight":
            t = weights[i.key]
            if (tuple(t.shape), str(t.dtype).removeprefix("torch.")) != (i.spec.shape, i.spec.dtype):
                return False
    return True


def trace_keys(model, inputs, archs, cache, model_file, reporter, dynamic: Dynamic | None = None,
               sharding: tuple | None = None, max_tokens: int | None = None) -> dict:
    """Trace cache keys for every arch, computed before any trace (a trace imports
    Inductor, whose configs are part of the key once imported). ``sharding``: what tensor
    parallel split (``Sharding.key``), which the model's own fingerprint does not show;
    ``max_tokens``: the size class of ``dynamic`` traced."""
    from ..cache.store import trace_keys as keys
    from ..cache.fingerprint import Uncacheable

    if not cache.enabled:
        return {a: None for a in archs}
    try:
        extra = dynamic if sharding is None else (dynamic, sharding)
        return keys(model, inputs, archs, model_file, extra=extra if max_tokens is None else (extra, max_tokens))
    except Uncacheable as exc:
        reporter.detail(f"traces are not cached for this model: {exc}")
        return {a: None for a in archs}


def trace_beside(model, inputs, arch, cache, keys: list, dynamic: Dynamic | None = None,
                 classes: tuple = (None,)):
    """The traces ``trace_stage`` would make for these classes (those whose ``keys`` find no
    entry in the cache), made now in a child process forked from this one (``forked``), which
    traces its size classes one after the other; None when all may be cached. Give it to
    ``trace_stage(beside=...)``."""
    from . import forked
    from .entry import trace_classes

    missing = tuple(t for t, key in zip(classes, keys) if key is None or not cache.may_have_trace(key))
    if not missing:
        return None

    def trace():
        os.environ[forked.DISABLE] = "1"  # its classes one after the other: the CPUs are taken
        traced = trace_classes(model, inputs, arch, missing, dynamic=dynamic)
        return {t: entry_of(model, *trace) for t, trace in zip(missing, traced)}

    return forked.Child(trace)


def trace_stage(model, inputs, arch, cache, keys: list, reporter, where: list[str], dynamic: Dynamic | None = None,
                classes: tuple = (None,), beside=None) -> list[Traced]:
    """The trace for ``sm_{arch}`` of each size class in ``classes`` (``dynamic``'s, by their
    ``max_tokens``; None: every size), from the cache when its key in ``keys`` finds one that
    fits; the others from ``beside`` (``trace_beside``'s child) where it made them, else traced
    here together (one export). ``where`` names each trace in messages."""
    found: dict = {}
    for max_tokens, key, named in zip(classes, keys, where):
        entry = cache.get_trace(key) if key is not None else None
        if entry is None:
            continue
        graph, structure = entry["graph"], entry["structure"]
        weights = weights_of(model, graph, entry.get("constants") or {})
        if graph.arch == arch and graph.dynamic == dynamic and weights is not None and _fits(graph, inputs, weights):
            reporter.line(f"trace for {named}: from the build cache")
            found[max_tokens] = Traced(graph, weights, structure, cached=True)
        else:
            reporter.detail(f"{named}: the cached trace does not fit the model; tracing again")
    missing = [(t, key, named) for t, key, named in zip(classes, keys, where) if t not in found]
    if beside is not None:
        missing = _from_beside(beside, missing, model, reporter, cache, found)
    if missing:
        from .entry import trace_classes

        label = missing[0][2] if len(missing) == 1 else f"{missing[0][2]} ({len(missing)} size classes)"
        with reporter.stage(f"trace for {label}", timing_key="trace"):
            traced = trace_classes(model, inputs, arch, tuple(t for t, _, _ in missing), dynamic=dynamic,
                                   note=reporter.detail)
        for (max_tokens, key, named), (graph, weights, structure) in zip(missing, traced):
            entry = entry_of(model, graph, weights, structure)
            if key is not None and not cache.put_trace(key, entry):
                reporter.detail(f"{named}: the trace holds values the build cache does not store; not cached")
            found[max_tokens] = Traced(graph, weights, structure, cached=False)
    return [found[t] for t in classes]
