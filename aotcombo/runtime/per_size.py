"""Graph mode with dynamic axes: a CUDA graph per distinct sizes of the axes.

A package built with ``--dynamic`` serves every size in its ranges from one set of
kernels; a CUDA graph, though, holds one shape. ``GraphPerSize`` keeps a ``GraphModel``
(graphs.py) per distinct sizes a call brings (a batch size; a batch and a sequence length),
all drawing on one memory pool. A size runs op by op until its ``capture_after``-th call,
which captures its graph (a capture cost about 15 ms for BERT-base on an H100: a size must
come back to pay for it); at most ``max_graphs`` sizes hold a graph, the capture of one more
dropping the graph of the size called least recently (its memory goes back to the pool for
the next capture). Memory stays bounded whatever sizes callers send. The calls before a
size's capture leave cuDNN's attention out (``ops.fresh_shapes``: no execution plan built for
a size that may never come back); its capture and replays use it.

The defaults (8th call, 64 graphs) are the measured best of ``benchmarks/graph_policy_bench.py``
(BERT-base, a search service's mix of 381 and 772 distinct sizes in 1500 calls, H100; warm,
every shape seen once before): mean 2.34 / 2.34 ms a call, against 3.41 / 3.98 capturing at the
second call and 2.68 / 2.61 for graphs of the first 64 sizes seen only (the policy before); from
a cold process 4.20 / 3.77 ms, 15.66 / 21.19 with cuDNN's attention at first sight
(docs/runtime_paths.md). Op by op took 2.19 / 2.16 there: that mix's calls are mostly bound by
the GPU, where a graph saves little; at sizes that recur and are bound by launches, a replay is
several times faster than op by op (docs/runtime_paths.md, shapes_bench).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict

import torch

from . import ops
from .checks import check_graph_budget
from .manifest import CAPTURE_AFTER, MAX_GRAPHS
from .graphs import GraphModel, StreamOrder
from .inputs import axis_dims, bind


class SizeCounts:
    """Calls per distinct sizes, the ``limit`` most recently counted kept (the rest forgotten)."""

    def __init__(self, limit: int):
        self.limit, self._calls, self._lock = limit, OrderedDict(), threading.Lock()

    def count(self, key) -> int:
        """This call's number among ``key``'s (1 at its first)."""
        with self._lock:
            calls = self._calls[key] = self._calls.pop(key, 0) + 1
            while len(self._calls) > self.limit:
                self._calls.popitem(last=False)
            return calls

    def forget(self, key) -> None:
        with self._lock:
            self._calls.pop(key, None)


def run_counted(model, inputs: tuple, counts: SizeCounts, capture_after: int):
    """``model.run`` or its staged run of ``inputs`` (op by op, with dynamic axes:
    ``load(graphs=False)``), under ``ops.fresh_shapes`` before their sizes' ``capture_after``-th
    call: a size that may never come back builds no cuDNN attention plan (38-82 ms at first
    sight), as in graph mode before a capture; one that recurs takes the fastest backend."""
    try:
        key = tuple(inputs[i].shape[d] for i, d in axis_dims(model.specs).values())
    except (IndexError, AttributeError):  # the input check names what is wrong
        key = None
    with ops.fresh_shapes() if counts.count(key) < capture_after else contextlib.nullcontext():
        if model.input_check is not None and not model.input_check(inputs):
            return model.run_staged(inputs)
        return model.run(inputs)


class GraphPerSize:
    """A package with dynamic axes in graph mode: one CUDA graph per distinct sizes of its
    axes (a batch size; a batch and a sequence length), captured at their ``capture_after``-th
    call (those before run op by op), replayed after.

    Memory: the graphs share one memory pool for their intermediates, so it holds about the
    largest forward's peak, not the sum; each size keeps its own static inputs and outputs.
    Their replays are serialised (one lock, one stream order), which is what makes sharing
    the pool safe. At most ``max_graphs`` sizes hold a graph, the least recently called one
    dropped for a new capture; ``PENDING`` sizes per graph at most are counted (or hold static
    inputs, waiting for their capture), the least recent forgotten past that.
    """

    PENDING = 4

    def __init__(self, model, copy_outputs: bool = True, max_graphs: int = MAX_GRAPHS, strict: bool = False,
                 capturer=None, capture_after: int = CAPTURE_AFTER):
        check_graph_budget(max_graphs, capture_after)
        self.name, self.variant, self.device, self.weights = model.name, model.variant, model.device, model.weights
        self.mutated, self.copy_outputs, self.max_graphs = model.mutated, copy_outputs, max_graphs
        self.capture_after, self._calls = capture_after, SizeCounts((self.PENDING + 1) * max_graphs)  # no graph yet
        self._strict = strict  # a failed capture raises (load(graphs=True)); else that size runs op by op
        self._model, self.names, self.input_check = model, model.names, model.input_check
        self._graphs: OrderedDict = OrderedDict()  # sizes -> GraphModel, least recently called first
        self._axes = axis_dims(model.specs)  # axis -> (input, dim) its size is read from
        self._where = tuple(self._axes.values())
        self._lock, self._order, self._pool = threading.Lock(), StreamOrder.on(model.device), None
        self._capturer, self.captures = capturer, 0

    def __call__(self, *inputs, **named):
        if named:
            inputs = bind(self.names, inputs, named)
        try:
            key = tuple(inputs[i].shape[d] for i, d in self._where)
        except (IndexError, AttributeError):  # the input check names what is wrong
            key = None
        graph = self._graphs.get(key)
        if graph is not None:
            outputs = graph.replay_bound(inputs)
            if outputs is not None:
                self._touch(key)
                return outputs
        fresh = graph is None or not graph.holds(inputs)
        exact = True
        if fresh:  # a graph's own static inputs need no check
            if self.input_check is not None:
                exact = self.input_check(inputs)
        if graph is None and not self._admit(key):
            with ops.fresh_shapes():
                return self._model.run(inputs) if exact else self._model.run_staged(inputs)
        return self._graph(key).replay_checked(inputs, fresh, exact)  # its first call: op by op, fresh_shapes

    def _admit(self, key: tuple) -> bool:
        """Whether ``key``'s sizes get a graph at this call, so that their ``capture_after``-th
        call captures it (their graph's first call runs op by op); else the call is counted."""
        if self._calls.count(key) + 1 >= self.capture_after:
            self._calls.forget(key)
            return True
        return False

    def static_inputs(self, batch: int | None = None, **sizes: int) -> tuple:
        """The input tensors of one size's graph (``static_inputs(8)`` for a batch of 8,
        ``static_inputs(batch=8, seq=77)``): write into them and call
        ``model(*model.static_inputs(...))``."""
        if batch is not None:
            sizes["batch"] = batch
        if set(sizes) != set(self._axes):
            raise ValueError(f"{self.name}: give a size for each dynamic axis ({', '.join(self._axes)}), "
                             f"got {', '.join(sizes) or 'none'}")
        for axis, size in sizes.items():
            low, high = self._model.ranges[axis]
            if not low <= size <= high:
                raise ValueError(f"{self.name}: {axis} size {size} is outside the range {low}..{high} it was "
                                 "built for")
        with self._lock:
            return self._entry(tuple(sizes[a] for a in self._axes)).static_inputs()

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates, live, shared by every size's graph."""
        return self._model.state()

    def reset_state(self) -> None:
        self._model.reset_state()

    def sizes(self) -> list:
        """The sizes that hold a graph now (captured at their ``capture_after``-th call): batch sizes with
        one dynamic axis, else tuples in the axes' order."""
        keys = sorted(k for k, g in self._graphs.items() if g.captured)
        return [k[0] for k in keys] if len(self._axes) == 1 else keys

    def _touch(self, key: tuple) -> None:
        with self._lock:
            if key in self._graphs:
                self._graphs.move_to_end(key)

    def _graph(self, key: tuple) -> GraphModel:
        """The graph of ``key``'s sizes for a call: if the call will capture it, room made first."""
        with self._lock:
            graph = self._entry(key)
            if graph.captures_next:
                self._forget(sum(g.captured for g in self._graphs.values()) - self.max_graphs + 1, captured=True)
                self.captures += 1
            return graph

    def _entry(self, key: tuple) -> GraphModel:
        """The graph of ``key``'s sizes, made at its first call, marked the most recently called
        (under the lock)."""
        graph = self._graphs.get(key)
        if graph is None:
            if self._pool is None and self._capturer is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = GraphModel(self._model, self.copy_outputs, self._order, self._lock, self._pool,
                               dict(zip(self._axes, key)), capturer=self._capturer, strict=self._strict)
            self._graphs[key] = graph
            self._forget(len(self._graphs) - (self.PENDING + 1) * self.max_graphs, captured=False)
        self._graphs.move_to_end(key)
        return graph

    def _forget(self, count: int, captured: bool) -> None:
        """Drop the ``count`` least recently called sizes that hold a graph (``captured``) or
        wait for their capture (not), but never the most recent one."""
        if count > 0:
            for key in [k for k, g in list(self._graphs.items())[:-1] if g.captured == captured][:count]:
                del self._graphs[key]

    def __repr__(self):
        return f"<Model {self.name} {self.variant} on {self.device}, a CUDA graph per size of {', '.join(self._axes)}>"
