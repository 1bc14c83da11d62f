"""Packages built for several batch sizes (``aotcombo build --batch 1,2,4``): one model per bucket.

A call reads dim 0 of its first batched input and looks its bucket up in a list indexed by
the batch size: O(1). Each bucket is loaded (and, in graph mode, captured) at its first
call (in graph mode captured at its second), or all at once by ``warm_up()``: in graph
mode each captured bucket holds its own
graph memory pool, the forward's peak at that size, for the model's life.

Padding (when the package was built with ``--pad``): a batch between buckets runs in the
next larger bucket, its batched inputs padded with zero rows, its batched outputs cut back
to the caller's rows; inputs the model updates in place get their rows copied back.
"""

from __future__ import annotations

import threading

import torch

from .inputs import bind
from .manifest import Buckets
from .outputs import flatten, unflatten


def lookup_table(sizes, pad: bool) -> list[int]:
    """``table[n]``: the bucket that runs batch ``n`` (0: none), for n in 0..max(sizes)."""
    table = [0] * (max(sizes) + 1)
    for size in sorted(sizes, reverse=True):
        if pad:
            table[1:size + 1] = [size] * size
        else:
            table[size] = size
    return table


def pad_rows(t: torch.Tensor, size: int) -> torch.Tensor:
    """``t`` with zero rows appended along dim 0 up to ``size``."""
    return torch.cat([t, t.new_zeros((size - t.shape[0], *t.shape[1:]))])


class BucketedModel:
    """``model(*inputs)`` runs the bucket of the inputs' batch size. ``load_bucket(size)``
    returns the model (op by op or graph) of one bucket."""

    def __init__(self, name: str, device: torch.device, load_bucket, buckets: Buckets, input_names: list[str],
                 state=None):
        self.name, self.device, self._load_bucket, self._state = name, device, load_bucket, state
        self.sizes, self.pad = buckets.sizes, buckets.pad
        self._inputs, self._outputs = buckets.batched_inputs, buckets.batched_outputs
        self._first, self._names = self._inputs[0], input_names
        self._table, self._models, self._lock = lookup_table(self.sizes, self.pad), {}, threading.Lock()
        self.mutated = ()

    def bucket(self, size: int):
        """The model of bucket ``size`` (one of ``sizes``), loaded on first use."""
        model = self._models.get(size)
        if model is None:
            if size not in self.sizes:
                raise ValueError(f"{self.name} has no bucket for batch {size}; its buckets are {list(self.sizes)}")
            with self._lock:
                model = self._models.get(size)
                if model is None:
                    model = self._models[size] = self._load_bucket(size)
                    self.mutated = model.mutated
        return model

    def warm_up(self) -> None:
        """Load (and in graph mode capture) every bucket now rather than at its first calls."""
        for size in self.sizes:
            model = self.bucket(size)
            if hasattr(model, "capture"):
                model.capture()

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates (a KV cache), live, shared by every bucket."""
        return dict(self._state.tensors) if self._state is not None else {}

    def reset_state(self) -> None:
        if self._state is not None:
            self._state.reset()

    def static_inputs(self, batch: int) -> tuple:
        """The static input tensors of bucket ``batch`` (see the bucket model's static_inputs)."""
        return self.bucket(batch).static_inputs()

    def _size_of(self, inputs: tuple) -> int:
        i = self._first
        if len(inputs) <= i or not isinstance(inputs[i], torch.Tensor) or inputs[i].dim() == 0:
            got = "nothing" if len(inputs) <= i else (
                "a 0-d tensor" if isinstance(inputs[i], torch.Tensor) else type(inputs[i]).__name__)
            raise TypeError(f"input {i} ({self._names[i]!r}): expected a tensor whose dim 0 is the batch, got {got}")
        return inputs[i].shape[0]

    def __call__(self, *inputs, **named):
        if named:
            inputs = bind(self._names, inputs, named)
        n = self._size_of(inputs)
        bucket = self._table[n] if n < len(self._table) else 0
        if not bucket:
            padding = f"; with padding, sizes 1 to {self.sizes[-1]} run" if self.pad else ""
            raise ValueError(
                f"input {self._first} ({self._names[self._first]!r}): batch size {n} is not one this package "
                f"was built for (buckets {list(self.sizes)}{padding}): rebuild with --batch including {n}"
                + ("" if self.pad else ", or with --pad to run it in the next larger bucket"))
        model = self._models.get(bucket) or self.bucket(bucket)
        if bucket == n:
            return model(*inputs)
        for i in self._inputs:
            if i < len(inputs) and isinstance(inputs[i], torch.Tensor) and inputs[i].dim() and inputs[i].shape[0] != n:
                raise ValueError(f"input {i} ({self._names[i]!r}): batch size {inputs[i].shape[0]}, but input "
                                 f"{self._first} has {n}: batched inputs must agree on dim 0")
        padded = tuple(pad_rows(t, bucket) if i in self._inputs else t for i, t in enumerate(inputs))
        outputs = model(*padded)
        for i in model.mutated:
            if i in self._inputs:
                inputs[i].copy_(padded[i][:n])
        leaves, spec = flatten(outputs)
        for i in self._outputs:
            leaves[i] = leaves[i][:n]
        return unflatten(spec, leaves)

    def __repr__(self):
        return f"<Model {self.name} on {self.device}, batch buckets {list(self.sizes)}{' padded' if self.pad else ''}>"
