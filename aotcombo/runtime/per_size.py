"""Graph mode with dynamic axes: a CUDA graph per distinct sizes of the axes.

A package built with ``--dynamic`` serves every size in its ranges from one set of
kernels; a CUDA graph, though, holds one shape. ``GraphPerSize`` keeps a ``GraphModel``
(graphs.py) per distinct sizes a call brings (a batch size; a batch and a sequence length),
each captured at that size's second call, all drawing on one memory pool. Past
``max_graphs`` sizes a new one runs op by op (``_OpByOp``): memory stays bounded whatever
sizes callers send.
"""

from __future__ import annotations

import threading

import torch

from .graphs import GraphModel, StreamOrder
from .inputs import axis_dims, bind


class GraphPerSize:
    """A package with dynamic axes in graph mode: one CUDA graph per distinct sizes of its
    axes (a batch size; a batch and a sequence length), captured at their second call (the
    first runs op by op), replayed after.

    Memory: the graphs share one memory pool for their intermediates, so it holds about the
    largest forward's peak, not the sum; each size keeps its own static inputs and outputs.
    Their replays are serialised (one lock, one stream order), which is what makes sharing
    the pool safe. Past ``max_graphs`` sizes, a new size runs op by op.
    """

    def __init__(self, model, copy_outputs: bool = True, max_graphs: int = 64, strict: bool = False):
        self.name, self.variant, self.device, self.weights = model.name, model.variant, model.device, model.weights
        self.mutated, self.copy_outputs, self.max_graphs = model.mutated, copy_outputs, max_graphs
        self._strict = strict  # a failed capture raises (load(graphs=True)); else that size runs op by op
        self._model, self._graphs, self.names, self.input_check = model, {}, model.names, model.input_check
        self._axes = axis_dims(model.specs)  # axis -> (input, dim) its size is read from
        self._where = tuple(self._axes.values())
        self._lock, self._order, self._pool = threading.Lock(), StreamOrder.on(model.device), None

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
                return outputs
        fresh = graph is None or not graph.holds(inputs)
        exact = True
        if fresh:  # a graph's own static inputs need no check
            if self.input_check is not None:
                exact = self.input_check(inputs)
            if graph is None:
                graph = self._graph(key)
        return graph.replay_checked(inputs, fresh, exact)

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
        key = tuple(sizes[a] for a in self._axes)
        graph = self._graphs.get(key) or self._graph(key)
        if isinstance(graph, _OpByOp):
            raise ValueError(  # noqa: TRY004 (the size is what is wrong, as for the range above)
                f"{self.name}: {_shown(self._axes, key)} runs op by op (no graph); pass your own inputs")
        return graph.static_inputs()

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates, live, shared by every size's graph."""
        return self._model.state()

    def reset_state(self) -> None:
        self._model.reset_state()

    def sizes(self) -> list:
        """The sizes that have their own graph so far (captured at their second call): batch
        sizes with one dynamic axis, else tuples in the axes' order."""
        keys = sorted(k for k, g in self._graphs.items() if isinstance(g, GraphModel))
        return [k[0] for k in keys] if len(self._axes) == 1 else keys

    def _graph(self, key: tuple):
        with self._lock:
            if key in self._graphs:
                return self._graphs[key]
            if len(self._graphs) >= self.max_graphs:
                graph = _OpByOp(self._model)
            else:
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                graph = GraphModel(self._model, self.copy_outputs, self._order, self._lock, self._pool,
                                   dict(zip(self._axes, key)), strict=self._strict)
            self._graphs[key] = graph
            return graph

    def __repr__(self):
        return f"<Model {self.name} {self.variant} on {self.device}, a CUDA graph per size of {', '.join(self._axes)}>"


def _shown(axes: dict, key: tuple) -> str:
    return ", ".join(f"{a} {k}" for a, k in zip(axes, key))


class _OpByOp:
    """A batch size past GraphPerSize's ``max_graphs``: run op by op, on inputs GraphPerSize
    has checked already; inputs of other strides or alignment are copied into the layout it
    was built for, as ``Model`` does."""

    def __init__(self, model):
        self._model = model

    def holds(self, inputs) -> bool:
        return False

    def replay_bound(self, inputs):
        return None

    def replay_checked(self, inputs, fresh: bool = True, exact: bool = True):
        return self._model.run(inputs) if exact else self._model.run_staged(inputs)
