"""Graph mode for inputs that come back: CUDA graphs captured on the caller's own tensors.

A serving loop passes its inputs at a few recurring addresses: the same tensors again, new
ones that torch's caching allocator puts where the last ones were, weights or optimizer
state passed as inputs. The main graph (graphs.py) costs such a call host work per tensor:
copies in (or its kernels re-pointed), the inputs the model updates copied back, the
outputs copied out. ``BoundGraphs`` instead captures, at the second call on one set of
input addresses, a graph bound to them: it reads those tensors in place, updates the ones
the model mutates in place, and ends by copying its outputs into one output slot
(outputs.py). A later call on the same addresses costs a C++ check of the inputs (torch's
own TensorGuards, which dynamo's guards use: dtype, device, shape, strides), a tuple of
data pointers, a free slot and one replay.

Both the check and the pointers are read at every call, for every input, even when the
inputs are the very tensor objects of the last call: a tensor's storage and layout change in
place (``resize_``, ``set_``, ``as_strided_``, ``unsqueeze_`` bump its version counter, but so
does every write of new values into it; ``.data =`` and ``torch.utils.swap_tensors`` change
neither its identity nor its version counter), so neither identity nor version counters
prove an input is where and as it was; reading a version costs as much as a data pointer
anyway. The pointers are a tuple made by ``Tensor.data_ptr``: torch's
``_tensors_data_ptrs_at_indices_equal`` compares them in one C++ call, but its pybind casts
cost as much per tensor. Each slot remembers the pointers of its last replay: when they
recur, its graph is replayed without hashing them.

A graph is keyed by (the inputs' data pointers, the output slot it writes); there are at
most ``MAX_GRAPHS`` per model and batch size, and past that calls go through the main
graph. Addresses are bound at their second call (the first goes through the main graph),
never when misaligned for the kernels or when they are the static inputs, and only by the
thread that captured the main graph: a capture cannot be a thread's first cuBLAS call (its
handle is made then), and only that thread's warm-up made it. The graphs take
their intermediates from the main graph's memory pool (replays are serialised by the
model's lock), so each adds only its executable graph. As on the main path, the GPU reads
the caller's inputs after the call returns, in the caller's stream order.
"""

from __future__ import annotations

import threading
import warnings

import torch

from .outputs import OutputSlots, copy_into, flatten

MAX_GRAPHS = 16
MAX_SEEN = 256  # address sets remembered as seen once
_data_ptr = torch.Tensor.data_ptr


def tensor_guard(templates: tuple):
    """``accepts(inputs)``: whether ``inputs`` have the dtypes, devices, shapes and strides of
    ``templates``, checked in C++ by torch's TensorGuards (tensors made under inference_mode
    carry other dispatch keys: they are checked against templates made there); None when
    this torch has no TensorGuards (then every call takes the main graph's path)."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        def guard_of(tensors):
            return TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check

        with torch.inference_mode():
            inference = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                              for t in templates)
        normal_check, inference_check = guard_of(templates), guard_of(inference)
        normal_check(*templates)
    except Exception:  # noqa: BLE001 (a torch without it, or with another signature)
        return None
    n = len(templates)

    def accepts(inputs: tuple) -> bool:
        try:
            return len(inputs) == n and (normal_check(*inputs) or inference_check(*inputs))
        except Exception:  # noqa: BLE001 (not tensors: the main path's guard names the problem)
            return False

    return accepts


class BoundGraphs:
    """The graphs bound to recurring input addresses of one model (and batch size).

    ``run(inputs, out)``: the forward op by op, writing the outputs it allocates itself into
    ``out`` where ``places`` (the others are copied there); ``templates``: the static inputs (their layout is
    what the kernels were built for; their addresses are never bound); ``aligns``: the
    bytes each input's data pointer must be a multiple of; ``slots``: the output slots the
    main path shares; ``capture(fn)``: a CUDA graph of ``fn()``, in the main graph's pool.
    """

    def __init__(self, run, templates: tuple, aligns: list[int], slots: OutputSlots, capture, accepts,
                 places: bool = False):
        self._run, self._slots, self._capture, self.accepts, self._places = run, slots, capture, accepts, places
        self._masks = [align - 1 for align in aligns]
        self._static = tuple(map(_data_ptr, templates))
        self._thread = threading.get_ident()  # the thread that warmed the forward up (its cuBLAS handle)
        self._graphs: dict = {}  # (pointers, slot) -> graph
        self._recent: dict = {}  # slot -> (pointers, graph) of its last replay: no hash of the pointers when they recur
        self._seen: dict = {}  # pointers -> whether they may be bound (seen once so far)

    def __len__(self) -> int:
        return len(self._graphs)

    def replay(self, inputs: tuple) -> list | None:
        """The output slot holding this call's outputs, after replaying the graph bound to the
        inputs' addresses (captured now, at their second call); None when the call must go
        through the main graph. ``inputs`` passed ``accepts``; the caller holds the model's lock."""
        pointers = tuple(map(_data_ptr, inputs))
        slot = self._slots.free()
        if slot is None:
            return None
        recent = self._recent.get(slot)
        if recent is not None and recent[0] == pointers:
            graph = recent[1]
        else:
            graph = self._graphs.get((pointers, slot))
            if graph is None:
                graph = self._bind(inputs, pointers, slot)
                if graph is None:
                    return None
            self._recent[slot] = pointers, graph
        graph.replay()
        return self._slots.slots[slot]

    def _bind(self, inputs: tuple, pointers: tuple, slot: int):
        may = self._seen.get(pointers)
        if may is None:  # the first call on these addresses
            if len(self._seen) >= MAX_SEEN:
                self._seen.clear()
            self._seen[pointers] = pointers != self._static and all(
                p & mask == 0 for p, mask in zip(pointers, self._masks))
            return None
        if not may or len(self._graphs) >= MAX_GRAPHS or threading.get_ident() != self._thread:
            return None
        try:
            graph = self._capture(lambda: self._forward_into(inputs, self._slots.slots[slot]))
        except Exception as e:  # noqa: BLE001 (the main graph answers instead)
            self._seen[pointers] = False
            warnings.warn(f"capturing a CUDA graph on the caller's input tensors failed ({e}); such calls "
                          "copy their inputs into the main graph's instead", stacklevel=4)
            return None
        self._graphs[(pointers, slot)] = graph
        return graph

    def _forward_into(self, inputs: tuple, targets: list) -> None:
        """The forward on ``inputs``, its outputs in ``targets``: written there by the program
        where it can, copied there after where not."""
        outputs = flatten(self._run(inputs, targets) if self._places else self._run(inputs))[0]
        rest = [(t, o) for t, o in zip(targets, outputs, strict=True) if o is not t]
        if rest:
            copy_into([t for t, _ in rest], [o for _, o in rest])
