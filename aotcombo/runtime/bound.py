"""Graph mode for inputs that come back: CUDA graphs captured on the caller's own tensors.

A serving loop passes its inputs at a few recurring addresses: the same tensors again, new
ones that torch's caching allocator puts where the last ones were, weights or optimizer
state passed as inputs. The main graph (graphs.py) costs such a call host work per tensor:
copies in (or its kernels re-pointed), the inputs the model updates copied back, the
outputs copied out. ``BoundGraphs`` instead captures, at the second call on one set of
input addresses, a graph bound to them: it reads those tensors in place, updates the ones
the model mutates in place, and writes its outputs into one output slot (outputs.py; with
``copy_outputs=False``, into the main graph's own outputs). A later call on the same
addresses costs one call of the bound graphs' *guard* and one replay. In this runtime a guard
is what says whether a captured graph may replay on a call's inputs, as dynamo's guards do:
it never raises; the *input check* (inputs.py) is what checks a call's inputs against the
manifest and names a mismatch. The guard is the C guard where the native wheel has it and it
can be trusted (``_guard.c``: one C call that checks dtype, device, shape and strides, reading
each tensor through torch's stable C shim, and finds the set of data pointers among those
seen; adam_step's 256 inputs in 13.9 us on the H100's host), else torch's TensorGuards, which
dynamo's guards use, and a tuple of data pointers looked up in a dict (about 160 ns an
input); both in torch_private.py.

The guard reads every input's layout and data pointer at every call, even when the inputs
are the very tensor objects of the last call: a tensor's storage and layout change in place
(``resize_``, ``set_``, ``as_strided_``, ``unsqueeze_`` bump its version counter, but so
does every write of new values into it; ``.data =`` and ``torch.utils.swap_tensors`` change
neither its identity nor its version counter), so neither identity nor version counters
prove an input is where and as it was. The C guard does not read torch's lazy negation bit
(set by torch's private ``_neg_view``): such an input is read as its memory holds, as the
main graph reads an input its kernels are re-pointed at; complex inputs, whose conjugate
views are common, always take TensorGuards.

A graph is keyed by (the inputs' pointer set, the output slot it writes); there are at
most ``MAX_GRAPHS`` per model and batch size, and past that calls go through the main
graph; ``MAX_SEEN`` pointer sets are remembered (those without a graph are forgotten when
that fills up). Addresses are bound at their second call (the first goes through the main
graph), never when misaligned for the kernels or when they are the static inputs, and only by the
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
from .torch_private import native_guard, tensor_guards

MAX_GRAPHS = 16
MAX_SEEN = 256  # pointer sets the guard remembers
_data_ptr = torch.Tensor.data_ptr


def bound_guard(templates: tuple, capacity: int = MAX_SEEN):
    """The guard of bound graphs: ``guard(inputs)`` is -2 when they do not have the
    dtypes, devices, shapes and strides of ``templates``, else the index of their
    pointer set among those remembered (``guard.remember()`` the last one's), -1 for a new
    one. The C guard where it can be trusted, else torch's TensorGuards; None when neither
    works here (then every call takes the main graph's path)."""
    guard = native_guard(templates, capacity)
    if guard is not None:
        return guard
    accepts = tensor_guards(templates)
    return None if accepts is None else PointerSets(accepts, capacity)


class PointerSets:
    """The C guard's interface (``_guard.Guard``) on ``accepts`` (TensorGuards) and a dict
    of data pointer tuples."""

    def __init__(self, accepts, capacity: int):
        self._accepts, self._index, self._sets = accepts, {}, {}
        self._free, self._last = list(range(capacity - 1, -1, -1)), ()

    def __call__(self, inputs: tuple) -> int:
        if not self._accepts(inputs):
            return -2
        self._last = tuple(map(_data_ptr, inputs))
        return self._index.get(self._last, -1)

    def pointers(self) -> tuple:
        return self._last

    def remember(self) -> int:
        if not self._free:
            raise ValueError("guard: all pointer sets are in use")
        k = self._free.pop()
        self._index[self._last], self._sets[k] = k, self._last
        return k

    def forget(self, k: int) -> None:
        del self._index[self._sets.pop(k)]
        self._free.append(k)


class BoundGraphs:
    """The graphs bound to recurring input addresses of one model (and batch size).

    ``run(inputs, out)``: the forward op by op, writing the outputs it allocates itself into
    ``out`` (the others are copied there; ``places=False``: a ``run(inputs)`` that writes none,
    as the tests' stand-ins); ``templates``: the static inputs (their layout is what the
    kernels were built for; their addresses are never bound); ``aligns``: the
    bytes each input's data pointer must be a multiple of; ``slots``: the output slots the
    main path shares; ``capture(fn)``: a CUDA graph of ``fn()``, in the main graph's pool.
    """

    def __init__(self, run, templates: tuple, aligns: list[int], slots: OutputSlots, capture, guard,
                 places: bool = True):
        self._run, self._slots, self._capture, self._guard, self._places = run, slots, capture, guard, places
        self._masks = [align - 1 for align in aligns]
        self._static = tuple(map(_data_ptr, templates))
        self._thread = threading.get_ident()  # the thread that warmed the forward up (its cuBLAS handle)
        self._graphs: dict = {}  # (pointer set, slot) -> graph
        self._bindable: dict = {}  # pointer set -> whether it may be bound (remembered by the guard)

    def __len__(self) -> int:
        return len(self._graphs)

    def accepts(self, inputs: tuple) -> bool:
        """Whether ``inputs`` have the layout a bound graph reads (the caller holds the model's lock)."""
        return self._guard(inputs) != -2

    def replay(self, inputs: tuple) -> list | None:
        """The output slot holding this call's outputs, after replaying the graph bound to the
        inputs' addresses (captured now, at their second call); None when the call must go
        through the main graph. The caller holds the model's lock."""
        key = self._guard(inputs)
        if key == -2:
            return None
        slot = self._slots.free()
        if slot is None:
            return None
        graph = self._graphs.get((key, slot))
        if graph is None:
            graph = self._bind(inputs, key, slot)
            if graph is None:
                return None
        graph.replay()
        return self._slots.slots[slot]

    def _bind(self, inputs: tuple, key: int, slot: int):
        if key == -1:  # the first call on these addresses: remembered
            if len(self._bindable) >= MAX_SEEN:
                for k in set(self._bindable) - {k for k, _ in self._graphs}:
                    self._guard.forget(k)
                    del self._bindable[k]
            pointers = self._guard.pointers()
            self._bindable[self._guard.remember()] = pointers != self._static and all(
                p & mask == 0 for p, mask in zip(pointers, self._masks))
            return None
        if not self._bindable[key] or len(self._graphs) >= MAX_GRAPHS or threading.get_ident() != self._thread:
            return None
        try:
            graph = self._capture(lambda: self._forward_into(inputs, self._slots.slots[slot]))
        except Exception as e:  # noqa: BLE001 (the main graph answers instead)
            self._bindable[key] = False
            warnings.warn(f"capturing a CUDA graph on the caller's input tensors failed ({e}); such calls "
                          "copy their inputs into the main graph's instead", stacklevel=4)
            return None
        self._graphs[(key, slot)] = graph
        return graph

    def _forward_into(self, inputs: tuple, targets: list) -> None:
        """The forward on ``inputs``, its outputs in ``targets``: written there by the program
        where it can, copied there after where not."""
        outputs = flatten(self._run(inputs, targets) if self._places else self._run(inputs))[0]
        rest = [(t, o) for t, o in zip(targets, outputs, strict=True) if not _same(t, o)]
        if rest:
            copy_into([t for t, _ in rest], [o for _, o in rest])


def _same(target: torch.Tensor, output: torch.Tensor) -> bool:
    """Whether the program wrote ``output`` in ``target`` itself (the tensor, or a view of the
    same memory and layout: an output placed around its buffer, ops.placed_root)."""
    return output is target or (output.data_ptr() == target.data_ptr() and output.dtype == target.dtype
                                and output.shape == target.shape and output.stride() == target.stride())
