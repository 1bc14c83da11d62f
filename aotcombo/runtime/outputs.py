"""What a call hands back: output trees, and output tensors the caller may keep without an
allocation per call.

``flatten``/``unflatten`` take a forward's output tree (tuples, lists, dicts, other values
kept) apart into its tensors and put it back together. ``OutputSlots`` holds a few sets of
tensors shaped as the graph's outputs (slots), each carved from one allocation per dtype
at offsets aligned as torch aligns a buffer (``SLOT_ALIGN``: kernels write there as fast
as into buffers of their own); a slot is free again once the caller holds none of its
tensors and no view of them (Python's reference counts of the tensors and the storages'
use counts are back to what the slots themselves hold). In a loop ``y = m(x)`` two slots
alternate; when the caller holds every slot, a call gets a set of its own (``new_set``),
never one the caller holds. ``StaticOutputs`` is the one slot of ``copy_outputs=False``.

An output that is a view of a buffer the program allocates (a padded LM head's logits, a slice of
its columns) has that whole buffer around it in its slot, where the buffer is at most a little
larger (``room``): given the slot, the program allocates the buffer there (``ops.placed_root``) and
writes the output in place, with no copy out.
"""

from __future__ import annotations

import sys

import torch

from .torch_private import foreach_copy, storage_handle, storage_use_count

FOREACH_FROM = 8  # copy this many tensors or more with one _foreach_copy_, fewer one by one (memcpys)
# Bytes each output's offset in its slot's allocation is a multiple of: torch's allocator aligns
# a buffer so. Kernels write outputs packed closer slower: on an H100 adam_step's bound graph
# took 115 us with 128-byte offsets, 110 at 512 and 109 into buffers of their own
# (benchmarks/slot_layout.py, benchmarks/results/call_path/c_guard/slot_layout.log).
SLOT_ALIGN = 512


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
    if isinstance(tree, dict):  # a dict or an OrderedDict, rebuilt as such
        return type(tree), {key: _spec(child, leaves) for key, child in tree.items()}
    return "value", tree


def unflatten(spec, leaves: list):
    """The tree ``spec`` describes, holding ``leaves`` in order."""
    return leaves[0] if spec is None else _build(spec, iter(leaves))


def unflattener(spec):
    """``unflatten(spec, ·)`` as one function, quick for the common trees: one tensor, a flat
    tuple of tensors."""
    if spec is None:
        return _first
    if spec[0] is tuple and all(child is None for child in spec[1]):
        return tuple
    return lambda leaves: _build(spec, iter(leaves))


def _first(leaves: list):
    return leaves[0]


def _build(spec, leaves):
    if spec is None:
        return next(leaves)
    kind, children = spec
    if kind == "value":
        return children
    if isinstance(children, dict):
        return kind((key, _build(child, leaves)) for key, child in children.items())
    return kind([_build(child, leaves) for child in children])


def copy_into(targets, sources) -> None:
    """``target.copy_(source)`` for each pair, in one foreach call when there are many."""
    if foreach_copy is not None and len(targets) >= FOREACH_FROM:
        foreach_copy(list(targets), list(sources))
    else:
        for target, source in zip(targets, sources, strict=True):
            target.copy_(source)


class Slot(list):
    """A slot's tensors; ``rooms``: for each, (elements before it, elements in all) of the region
    of its allocation the slot holds for it (its whole buffer, or the tensor alone)."""

    rooms: tuple = ()


class OutputSlots:
    """Up to ``keep`` sets (slots) of tensors laid out as ``sources`` (same shapes, strides
    and dtypes), reused once the caller lets go of them; see the module's docstring."""

    def __init__(self, sources: list, keep: int = 2):
        self.layout, self.totals, rooms = [], {}, []
        for t in sources:
            dense = _no_overlap(t)
            stride = t.stride() if dense else torch.empty_like(t).stride()  # an expand's: dense
            span = span_of(t.shape, stride) if t.numel() else 0
            head, extent = _buffer_around(t, span) if dense else (0, span)
            step = max(1, SLOT_ALIGN // t.element_size())
            offset = -(-self.totals.get(t.dtype, 0) // step) * step
            self.layout.append((t.dtype, tuple(t.shape), stride, offset + head))
            self.totals[t.dtype] = offset + extent
            rooms.append((head, extent))
        self.rooms = tuple(rooms)
        self.device, self.sources = sources[0].device if sources else None, list(sources)
        self._use_count = storage_use_count  # None: slots are never reused
        self.keep = keep if self._use_count is not None else 0
        self.slots: list[list] = []  # each slot's tensors
        self._held: list[tuple] = []  # each slot's (flat storages, reference counts, use counts) when free

    def free(self) -> int | None:
        """A slot the caller holds nothing of (a new one while there are fewer than ``keep``),
        or None when the caller holds every slot: one the caller holds a tensor of (its
        reference count is up) or a view of (its storage's use count is up)."""
        use_count = self._use_count
        for k, (flats, counts, uses) in enumerate(self._held):
            if same_refcounts(self.slots[k], counts) and list(map(use_count, flats)) == uses:
                return k
        if len(self.slots) >= self.keep:
            return None
        tensors, flats = self.new_set()
        self.slots.append(tensors)
        self._held.append((flats, refcounts(tensors), list(map(self._use_count, flats))))
        return len(self.slots) - 1

    def new_set(self) -> tuple[list, list]:
        """A set of output tensors of its own (not a slot), and its flat storages' handles."""
        flat = {dtype: torch.empty(total, dtype=dtype, device=self.device) for dtype, total in self.totals.items()}
        tensors = Slot(flat[dtype].as_strided(shape, stride, offset) for dtype, shape, stride, offset in self.layout)
        tensors.rooms = self.rooms
        return tensors, [storage_handle(f) for f in flat.values()]

    def __call__(self) -> list:
        """The sources' values in a free slot, or in a new set when the caller holds every slot."""
        k = self.free()
        tensors = self.new_set()[0] if k is None else self.slots[k]
        copy_into(tensors, self.sources)
        return tensors


class StaticOutputs:
    """``OutputSlots``' interface on one slot that is always free: the main graph's own output
    tensors, which ``copy_outputs=False`` hands out, valid until the next call."""

    def __init__(self, outputs: list):
        self.slots = [outputs]

    def free(self) -> int:
        return 0


def room(span: int, extent: int) -> bool:
    """Whether an output slot holds, around an output of ``span`` elements, the whole buffer of
    ``extent`` elements that output is a view of: when that buffer is at most a quarter (or 4096
    elements) larger. ``OutputSlots`` and ``ops.placed_root`` decide by it alike."""
    return span <= extent <= span + max(span // 4, 4096)


def span_of(shape, stride) -> int:
    """Elements from a dense layout's first to its last, both included."""
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def _buffer_around(t: torch.Tensor, span: int) -> tuple[int, int]:
    """(elements before ``t``, elements in all) of the whole buffer ``t`` is a view of, where a slot
    holds it (``room``); else (0, ``span``): ``t`` alone."""
    head, extent = t.storage_offset(), t.untyped_storage().nbytes() // t.element_size()
    if span and head + span <= extent and room(span, extent):
        return head, extent
    return 0, span


def _no_overlap(t: torch.Tensor) -> bool:
    """Whether no two elements of ``t`` share an address (so its own strides can lay out a
    slot: a program can write its output there as it would into its own buffer)."""
    reach = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1):
        if stride < reach:
            return False
        reach += stride * (size - 1)
    return True


try:  # the reference counts of a list's tensors, read in C (runtime/_guard.c)
    from ._guard import refcounts, same_refcounts
except ImportError:  # the pure wheel
    def refcounts(tensors: list) -> tuple:
        return tuple(map(sys.getrefcount, tensors))

    def same_refcounts(tensors: list, counts: tuple) -> bool:
        return refcounts(tensors) == counts
