"""Graph mode: the whole forward, kernels and torch ops, captured once in a CUDA graph and replayed.

Memory: the capture allocates the forward's intermediates and outputs from the graph's
private memory pool, the preplanned arena: as much as the forward's peak, held for the
model's life. Every ``load(graphs=True)`` captures its own graph, so that is one pool per
loaded model per device, plus its static inputs.

Inputs: a call checks its inputs (unless ``check_inputs=False``) and copies them into the
static input buffers; a caller that writes into ``model.static_inputs()`` and passes those
very tensors skips both. Inputs the model updates in place are copied back after the replay. Outputs: by default a call returns fresh copies the caller may
keep (device-to-device copies); ``copy_outputs=False`` returns the static output tensors
themselves, valid until the next call of the model, from any thread, overwrites them.

Streams and threads: a call replays on the caller's current stream. The graph's buffers
are shared, so calls are serialised: on the host by a lock around copy-in, replay and
copy-out; on the GPU, a call on another stream than the previous call's first makes its
stream wait for that one (an event). Calls from several threads and streams are correct
but do not overlap on the GPU: for that, load a model per stream, or use graphs=False.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import warnings

import torch

from . import cuda
from .inputs import allocate

_foreach_copy = getattr(torch, "_foreach_copy_", None)
FOREACH_FROM = 8  # copy this many tensors or more with one _foreach_copy_, fewer one by one (memcpys)


def flatten(tree) -> tuple[list, object]:
    """The tensors of an output tree (tuples, lists, dicts; other values kept) and its spec."""
    leaves = []
    return leaves, _spec(tree, leaves)


def _spec(tree, leaves: list):
    if isinstance(tree, torch.Tensor):
        leaves.append(tree)
        return None
    if isinstance(tree, (tuple, list)):
        return type(tree), [_spec(child, leaves) for child in tree]
    if isinstance(tree, dict):
        return dict, {key: _spec(child, leaves) for key, child in tree.items()}
    return "value", tree


def unflatten(spec, leaves: list):
    """The tree ``spec`` describes, holding ``leaves`` in order."""
    return leaves[0] if spec is None else _build(spec, iter(leaves))


def _build(spec, leaves):
    if spec is None:
        return next(leaves)
    kind, children = spec
    if kind == "value":
        return children
    if kind is dict:
        return {key: _build(child, leaves) for key, child in children.items()}
    return kind([_build(child, leaves) for child in children])


def copy_into(targets, sources) -> None:
    """``target.copy_(source)`` for each pair, in one foreach call when there are many."""
    if _foreach_copy is not None and len(targets) >= FOREACH_FROM:
        _foreach_copy(list(targets), list(sources))
    else:
        for target, source in zip(targets, sources, strict=True):
            target.copy_(source)


def fresh_copies(tensors: list) -> list:
    """New tensors holding the values of ``tensors``, for the caller to keep."""
    copies = [torch.empty_like(t) for t in tensors]
    copy_into(copies, tensors)
    return copies


def same_tensors(a: tuple, b: tuple) -> bool:
    """Whether ``a`` holds exactly the tensor objects of ``b``, in order."""
    return len(a) == len(b) and all(map(operator.is_, a, b))


class StreamOrder:
    """Orders calls that come from different streams: ``join()``, under the model's lock,
    makes the caller's stream wait for all work queued so far on the previous call's stream."""

    def __init__(self, raw_stream, current_stream, event):
        self._raw_stream, self._current_stream, self._event = raw_stream, current_stream, event
        self._raw, self._stream = None, None

    @classmethod
    def on(cls, device: torch.device) -> StreamOrder:
        return cls(lambda: cuda.current_stream(device.index), lambda: torch.cuda.current_stream(device),
                   torch.cuda.Event())

    def join(self) -> None:
        raw = self._raw_stream()
        if raw != self._raw:
            stream = self._current_stream()
            if self._stream is not None:
                self._event.record(self._stream)
                stream.wait_event(self._event)
            self._raw, self._stream = raw, stream


def capture(run, inputs: tuple, device: torch.device, pool=None, state=None):
    """Run ``run(inputs)`` once to warm up (cuBLAS and cuDNN workspaces, lazy module loading,
    kernel scratch), then capture it in a CUDA graph, both on a side stream, as
    torch.cuda.graphs requires; returns (graph, outputs). ``pool``: a memory pool shared
    with other graphs that never run at the same time. ``state``: the model's State, which
    the warm-up run writes: put back after, so a capture (a new batch size's, mid-generation)
    leaves the KV cache as it found it."""
    saved = state.snapshot() if state is not None and state.tensors else None
    with torch.cuda.device(device):
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            run(inputs)
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")  # other threads may go on
            try:
                outputs = run(inputs)
            except BaseException:
                with contextlib.suppress(Exception):
                    graph.capture_end()
                raise
            graph.capture_end()
            if saved is not None:
                state.restore(saved)
        stream.synchronize()
    return graph, outputs


class GraphModel:
    """A package loaded on one device in graph mode: ``model(*inputs)`` replays its graph."""

    def __init__(self, model, graph, inputs: tuple, outputs, copy_outputs: bool = True, order=None, lock=None):
        self.name, self.variant, self.device, self.weights = model.name, model.variant, model.device, model.weights
        self._model, self._graph, self._inputs, self.guard = model, graph, inputs, model.guard
        self._outputs, self._spec = flatten(outputs)
        self.mutated = getattr(model, "mutated", ())
        self.copy_outputs, self._lock = copy_outputs, lock or threading.Lock()
        self._order = order or StreamOrder.on(model.device)

    @classmethod
    def capture(cls, model, copy_outputs: bool = True) -> GraphModel:
        """Capture ``model`` (a Model: its kernels and weights) with fresh static inputs."""
        inputs = allocate(model.specs, model.device)
        graph, outputs = capture(model.run, inputs, model.device, state=model.state_buffers)
        return cls(model, graph, inputs, outputs, copy_outputs)

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates, live (see Model.state): each replay updates them."""
        return self._model.state()

    def reset_state(self) -> None:
        self._model.reset_state()

    def static_inputs(self) -> tuple:
        """The graph's input tensors: write into them and call ``model(*model.static_inputs())``."""
        return self._inputs

    def holds(self, inputs: tuple) -> bool:
        """Whether ``inputs`` are this graph's static input tensors themselves."""
        return same_tensors(inputs, self._inputs)

    def __call__(self, *inputs):
        fresh = not self.holds(inputs)
        if fresh and self.guard is not None:
            self.guard(inputs)
        return self.replay_checked(inputs, fresh)

    def replay_checked(self, inputs: tuple, fresh: bool):
        """A call on inputs known to pass the guard; ``fresh``: not the static inputs themselves."""
        with self._lock:
            self._order.join()
            if fresh:
                copy_into(self._inputs, inputs)
            self._graph.replay()
            if fresh:  # the graph updated its static copy of an input the model mutates: hand it back
                for i in self.mutated:
                    inputs[i].copy_(self._inputs[i])
            outputs = fresh_copies(self._outputs) if self.copy_outputs else self._outputs
        return unflatten(self._spec, outputs)

    def __repr__(self):
        return f"<Model {self.name} {self.variant} on {self.device}, CUDA graph>"


class GraphPerSize:
    """A package with a dynamic batch in graph mode: one CUDA graph per batch size, captured
    at that size's first call (a few milliseconds), replayed after.

    Memory: the graphs share one memory pool for their intermediates, so it holds about the
    largest forward's peak, not the sum; each size keeps its own static inputs and outputs.
    Their replays are serialised (one lock, one stream order), which is what makes sharing
    the pool safe. Past ``max_graphs`` sizes, a new size runs op by op.
    """

    def __init__(self, model, copy_outputs: bool = True, max_graphs: int = 64, strict: bool = False):
        self.name, self.variant, self.device, self.weights = model.name, model.variant, model.device, model.weights
        self.mutated, self.copy_outputs, self.max_graphs = model.mutated, copy_outputs, max_graphs
        self._strict = strict  # a failed capture raises (load(graphs=True)); else that size runs op by op
        self._model, self.guard, self._graphs = model, model.guard, {}
        self._first = next(i for i, spec in enumerate(model.specs) if spec.batched)
        self._lock, self._order, self._pool = threading.Lock(), StreamOrder.on(model.device), None

    def __call__(self, *inputs):
        try:
            graph = self._graphs.get(inputs[self._first].shape[0])
        except (IndexError, AttributeError):  # the guard names what is wrong
            graph = None
        fresh = graph is None or not graph.holds(inputs)
        if fresh:  # a graph's own static inputs need no check
            if self.guard is not None:
                self.guard(inputs)
            if graph is None:
                graph = self._capture(inputs[self._first].shape[0])
        return graph.replay_checked(inputs, fresh)

    def static_inputs(self, batch: int) -> tuple:
        """The input tensors of batch size ``batch``'s graph (captured now if it is not yet):
        write into them and call ``model(*model.static_inputs(batch))``."""
        low, high = self._model.batch_range
        if not low <= batch <= high:
            raise ValueError(f"{self.name}: batch size {batch} is outside the range {low}..{high} it was built for")
        graph = self._graphs.get(batch) or self._capture(batch)
        if not isinstance(graph, GraphModel):
            raise ValueError(f"{self.name}: batch {batch} runs op by op (no graph); pass your own inputs")
        return graph.static_inputs()

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates, live, shared by every batch size's graph."""
        return self._model.state()

    def reset_state(self) -> None:
        self._model.reset_state()

    def sizes(self) -> list[int]:
        """The batch sizes captured so far."""
        return sorted(s for s, g in self._graphs.items() if isinstance(g, GraphModel))

    def _capture(self, size: int):
        with self._lock:
            if size in self._graphs:
                return self._graphs[size]
            if len(self._graphs) >= self.max_graphs:
                graph = _Unchecked(self._model)
            else:
                graph = self._capture_size(size)
            self._graphs[size] = graph
            return graph

    def _capture_size(self, size: int):
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        inputs = allocate(self._model.specs, self.device, batch=size)
        try:
            graph, outputs = capture(self._model.run, inputs, self.device, pool=self._pool,
                                     state=self._model.state_buffers)
        except Exception as e:
            message = f"{self.name}: capturing the forward for batch {size} in a CUDA graph failed: {e}"
            if self._strict:
                raise RuntimeError(f"{message}; load(..., graphs=False) runs it op by op") from e
            warnings.warn(f"{message}; running that size op by op", stacklevel=4)
            return _Unchecked(self._model)
        return GraphModel(self._model, graph, inputs, outputs, self.copy_outputs, self._order, self._lock)

    def __repr__(self):
        return f"<Model {self.name} {self.variant} on {self.device}, a CUDA graph per batch size>"


class _Unchecked:
    """A model run op by op on inputs already checked (GraphPerSize past its max_graphs)."""

    def __init__(self, model):
        self._model = model

    def holds(self, inputs) -> bool:
        return False

    def replay_checked(self, inputs, fresh: bool = True):
        return self._model.run(inputs)
