"""Graph mode: the whole forward, kernels and torch ops, captured once in a CUDA graph and replayed.

When: the first call runs op by op (its answer comes as soon as the kernels are loaded);
the second captures the graph (a warm-up run, then the capture) and replays it, as does
every call after. ``load(graphs=True)`` captures at load instead, and raises if it fails.

Memory: the capture allocates the forward's intermediates and outputs from the graph's
private memory pool, the preplanned arena: as much as the forward's peak, held for the
model's life. Every load captures its own graph, so that is one pool per loaded model per
device, plus its static inputs.

A call takes the first of these paths that applies (docs/architecture.md gives each its
measured cost): (1) inputs at recurring addresses replay a graph bound to them (bound.py;
captured at their second call), no copy in or out; (2) the graph's own static inputs
(``model.static_inputs()``, the serving path): no check, no copy; else the input check runs
(``check_inputs=False`` skips it: the inputs must then have the built strides and
alignment), and (3) inputs of the built strides and alignment that only the package's
kernels read are read in place, the kernels re-pointed at them (repoint.py), the others
copied in; (4) anything else is copied into the static inputs, whatever its strides and
alignment. Before the capture, and after a failed one, the call runs op by op
(loader.Model).

The caller's tensors are read by the GPU after the call returns (the replay is queued on the
caller's stream, as any torch op would read them): change them only in stream order. Inputs
the model updates in place are copied back after the replay. Outputs: by default a call
returns tensors the caller may keep (output slots, outputs.py: copied from the graph's, or
written there by a bound graph); ``copy_outputs=False`` returns the static output tensors
themselves (a bound graph writes them too), valid until the next call of the model, from any
thread, overwrites them.

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

from . import cuda, ops
from .bound import BoundGraphs, bound_guard
from .inputs import allocate, bind
from .outputs import OutputSlots, StaticOutputs, copy_into, flatten, unflattener
from .repoint import Repointer


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
    kernel scratch), then capture it in a CUDA graph, both on the device's side stream, as
    torch.cuda.graphs requires; returns (graph, outputs), the graph instantiated and its
    template kept (``raw_cuda_graph()``: repoint.py reads its kernel nodes). ``pool``: a
    memory pool shared with other graphs that never run at the same time. ``state``: the
    model's State, which the warm-up run writes: put back after, so a capture (a new batch
    size's, mid-generation) leaves the KV cache as it found it; so is torch's CUDA random
    generator, so the first replay draws what an op-by-op call would have."""
    saved = state.snapshot() if state is not None and state.tensors else None
    rng = torch.cuda.get_rng_state(device)  # the warm-up's random draws are put back too
    with torch.cuda.device(device):
        stream = side_stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            run(inputs)
            graph = _new_graph()
            outputs = _captured(graph, pool, lambda: run(inputs))
            if getattr(graph, "_keeps_graph", False):
                graph.instantiate()
            if saved is not None:
                state.restore(saved)
            torch.cuda.set_rng_state(rng, device)
        stream.synchronize()
    return graph, outputs


def capture_call(fn, device: torch.device, pool):
    """A CUDA graph of ``fn()`` in ``pool``, captured on the device's side stream without a
    warm-up (the main capture warmed the forward up on that stream: its workspaces exist);
    torch's CUDA random generator is left as it was."""
    rng = torch.cuda.get_rng_state(device)
    with torch.cuda.device(device):
        stream = side_stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            graph = torch.cuda.CUDAGraph()
            _captured(graph, pool, fn)
        torch.cuda.set_rng_state(rng, device)
        torch.cuda.current_stream(device).wait_stream(stream)
    return graph


def _captured(graph, pool, fn):
    """``fn()`` captured into ``graph`` (other threads may go on meanwhile); its result."""
    graph.capture_begin(pool=pool, capture_error_mode="thread_local")
    try:
        result = fn()
    except BaseException:
        with contextlib.suppress(Exception):
            graph.capture_end()
        raise
    graph.capture_end()
    return result


_side_streams: dict = {}


def side_stream(device: torch.device):
    """The stream every capture on ``device`` runs on (one, so cuBLAS's workspace for it is
    made once, at the first warm-up)."""
    if device not in _side_streams:
        _side_streams[device] = torch.cuda.Stream(device)
    return _side_streams[device]


def _new_graph():
    """A CUDAGraph that keeps its template after the capture (torch >= 2.9), where torch can."""
    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        return torch.cuda.CUDAGraph()
    graph._keeps_graph = True
    return graph


class GraphModel:
    """A package loaded on one device in graph mode: ``model(*inputs)`` replays its graph.

    The graph is captured at the second call (the first runs op by op, so a first output
    comes as soon as the kernels are loaded), or at once by ``capture()``."""

    def __init__(self, model, copy_outputs: bool = True, order=None, lock=None, pool=None, sizes: dict | None = None,
                 capturer=None, strict: bool = False):
        self.name, self.variant, self.device, self.weights = model.name, model.variant, model.device, model.weights
        self.mutated, self.copy_outputs, self.names = model.mutated, copy_outputs, model.names
        self.input_check = model.input_check
        self._model, self._inputs = model, allocate(model.specs, model.device, sizes)
        self._lock, self._order = lock or threading.Lock(), order or StreamOrder.on(model.device)
        self._pool, self._capturer, self._strict = pool, capturer or capture, strict
        self._graph, self._answered, self._failed, self._repoint = None, False, False, None
        self._copied, self._copied_to = (), ()  # inputs copied in beside those the kernels read in place
        self._outputs, self._unflatten, self._slots, self._bound = [], None, None, None
        # Graphs bound to the caller's inputs (bound.py), but not with collectives: a bound graph is
        # captured when one rank's allocator brings addresses back, which other ranks' need not, and
        # every rank must run the same collectives at the same call.
        self._binds = capturer is None and model.device.type == "cuda" and not model.collectives

    def capture(self) -> GraphModel:
        """Capture the forward now (a warm-up run, then the capture, on the static inputs); a
        failure raises (load(graphs=True)) or warns and leaves the model op by op."""
        with self._lock:
            if self._graph is None and not self._failed:
                self._capture_now()
        return self

    def _capture(self) -> None:
        model = self._model
        graph, outputs = self._capturer(model.run, self._inputs, model.device, self._pool, model.state_buffers)
        self._outputs, spec = flatten(outputs)
        self._unflatten, self._slots = unflattener(spec), OutputSlots(self._outputs)
        direct = [i for i, s in enumerate(model.specs) if s.direct]
        self._repoint = Repointer.find(graph, model.kernels, self._inputs, direct, model.context) if direct else None
        if self._repoint is not None:
            self._copied = [i for i in range(len(self._inputs)) if i not in self._repoint.inputs]
            self._copied_to = [self._inputs[i] for i in self._copied]
        guard = bound_guard(self._inputs) if self._binds else None
        if guard is not None:
            slots = self._slots if self.copy_outputs else StaticOutputs(self._outputs)
            self._bound = BoundGraphs(model.run, self._inputs, [s.align for s in model.specs], slots,
                                      lambda fn: capture_call(fn, model.device, graph.pool()), guard)
        self._graph = graph

    @property
    def captured(self) -> bool:
        return self._graph is not None

    @property
    def captures_next(self) -> bool:
        """Whether the next call captures the graph (the first ran op by op)."""
        return self._graph is None and self._answered and not self._failed

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

    def __call__(self, *inputs, **named):
        if named:
            inputs = bind(self.names, inputs, named)
        if self._bound is not None:
            outputs = self.replay_bound(inputs)
            if outputs is not None:
                return outputs
        fresh = not self.holds(inputs)
        exact = self.input_check(inputs) if fresh and self.input_check is not None else True
        return self.replay_checked(inputs, fresh, exact)

    def replay_bound(self, inputs: tuple):
        """The outputs of a replay of the graph bound to the inputs' addresses (bound.py), or
        None where the call takes the main graph's path (the static inputs always do)."""
        bound = self._bound
        if bound is None or (inputs and inputs[0] is self._inputs[0]):
            return None
        with self._lock:  # the tree is built under the lock: its references keep the slot from the next call
            self._order.join()
            outputs = bound.replay(inputs)
            return None if outputs is None else self._unflatten(outputs)

    def replay_checked(self, inputs: tuple, fresh: bool, exact: bool = True):
        """A call on inputs that passed the input check; ``fresh``: not the static inputs
        themselves; ``exact``: their strides and alignment are the static inputs' too (else
        they are copied)."""
        with self._lock:
            self._order.join()
            if self._graph is None and (not self._answered or self._failed or not self._capture_now()):
                self._answered = True
                return self._run_once(inputs, exact)
            repoint = self._repoint
            if not fresh:
                if repoint is not None:
                    repoint.point(repoint.static)
            elif exact and repoint is not None:
                repoint.point(tuple(t.data_ptr() for t in inputs))
                if self._copied:
                    copy_into(self._copied_to, [inputs[i] for i in self._copied])
            else:
                if repoint is not None:
                    repoint.point(repoint.static)
                copy_into(self._inputs, inputs)
            self._graph.replay()
            if fresh:  # the graph updated its static copy of an input the model mutates: hand it back
                for i in self.mutated:
                    inputs[i].copy_(self._inputs[i])
            outputs = self._slots() if self.copy_outputs else self._outputs
            # Under the lock: until the tree holds the slot's tensors, another thread's call sees
            # the slot free (OutputSlots.free) and writes its own outputs there.
            return self._unflatten(outputs)

    def _run_once(self, inputs: tuple, exact: bool):
        """A call op by op (before the capture, or after a failed one): its outputs are its own.
        The one before the capture leaves cuDNN's attention out (``ops.fresh_shapes``): the
        capture builds its plan (38-82 ms at BERT-base's), not the first output."""
        with ops.fresh_shapes() if not self._failed else contextlib.nullcontext():
            return self._model.run(inputs) if exact else self._model.run_staged(inputs)

    def _capture_now(self) -> bool:
        """Capture at the second call: True when it worked; a failure raises (strict) or warns
        once and leaves the model op by op."""
        try:
            self._capture()
            return True
        except Exception as e:
            message = f"{self.name}: capturing the forward in a CUDA graph failed: {e}"
            if self._strict:
                raise RuntimeError(f"{message}; load(..., graphs=False) runs it op by op") from e
            warnings.warn(f"{message}; running it op by op (load(..., graphs=False) skips the capture)",
                          stacklevel=4)
            self._failed = True
            return False

    def __repr__(self):
        state = "CUDA graph" if self._graph is not None else "CUDA graph at its second call"
        return f"<Model {self.name} {self.variant} on {self.device}, {state}>"
