"""Packages built for several sizes of one axis (``aotcombo build --batch 1,2,4``, or
``--buckets seq=128,256,512``): one model per bucket.

A call reads the axis's size in its first input carrying it (dim 0 for the batch) and looks
its bucket up in a list indexed by the size: O(1). Each bucket is loaded (and, in graph mode, captured) at its first
call (in graph mode captured at its second), or all at once by ``warm_up()``: in graph
mode each captured bucket holds its own
graph memory pool, the forward's peak at that size, for the model's life.

Padding (when the package was built with ``--pad``): a size between buckets runs in the
next larger bucket, the inputs carrying the axis padded with zeros along it, the outputs
carrying it cut back to the caller's size; inputs the model updates in place get their part
copied back. (The build checks that padding leaves the outputs unchanged: shapes.py.)
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


def pad_rows(t: torch.Tensor, size: int, dim: int = 0) -> torch.Tensor:
    """``t`` with zeros appended along ``dim`` up to ``size``."""
    shape = list(t.shape)
    shape[dim] = size - t.shape[dim]
    return torch.cat([t, t.new_zeros(shape)], dim)


class BucketedModel:
    """``model(*inputs)`` runs the bucket of the inputs' batch size. ``load_bucket(size)``
    returns the model (op by op or graph) of one bucket."""

    def __init__(self, name: str, device: torch.device, load_bucket, buckets: Buckets, input_names: list[str],
                 state=None):
        self.name, self.device, self._load_bucket, self._state = name, device, load_bucket, state
        self.sizes, self.pad, self.axis = buckets.sizes, buckets.pad, buckets.axis
        self._inputs, self._outputs = dict(buckets.input_dims), dict(buckets.output_dims)
        (self._first, self._dim), self._names = buckets.input_dims[0], input_names
        self._table, self._models, self._lock = lookup_table(self.sizes, self.pad), {}, threading.Lock()
        self.mutated = ()

    def bucket(self, size: int):
        """The model of bucket ``size`` (one of ``sizes``), loaded on first use."""
        model = self._models.get(size)
        if model is None:
            if size not in self.sizes:
                raise ValueError(f"{self.name} has no bucket for {self.axis} {size}; its buckets are "
                                 f"{list(self.sizes)}")
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

    def static_inputs(self, size: int) -> tuple:
        """The static input tensors of bucket ``size`` (see the bucket model's static_inputs)."""
        return self.bucket(size).static_inputs()

    def _size_of(self, inputs: tuple) -> int:
        i, d = self._first, self._dim
        if len(inputs) <= i or not isinstance(inputs[i], torch.Tensor) or inputs[i].dim() <= d:
            got = "nothing" if len(inputs) <= i else (
                f"a {inputs[i].dim()}-d tensor" if isinstance(inputs[i], torch.Tensor) else type(inputs[i]).__name__)
            raise TypeError(f"input {i} ({self._names[i]!r}): expected a tensor whose dim {d} is the {self.axis}, "
                            f"got {got}")
        return inputs[i].shape[d]

    def __call__(self, *inputs, **named):
        if named:
            inputs = bind(self._names, inputs, named)
        n = self._size_of(inputs)
        bucket = self._table[n] if n < len(self._table) else 0
        if not bucket:
            padding = f"; with padding, sizes 1 to {self.sizes[-1]} run" if self.pad else ""
            option = "--batch" if self.axis == "batch" else f"--buckets {self.axis}=SIZES"
            raise ValueError(
                f"input {self._first} ({self._names[self._first]!r}): {self.axis} size {n} is not one this package "
                f"was built for (buckets {list(self.sizes)}{padding}): rebuild with {option} including {n}"
                + ("" if self.pad else ", or with --pad to run it in the next larger bucket"))
        model = self._models.get(bucket) or self.bucket(bucket)
        if bucket == n:
            return model(*inputs)
        for i, d in self._inputs.items():
            t = inputs[i] if i < len(inputs) else None
            if isinstance(t, torch.Tensor) and t.dim() > d and t.shape[d] != n:
                raise ValueError(f"input {i} ({self._names[i]!r}): {self.axis} size {t.shape[d]}, but input "
                                 f"{self._first} has {n}: inputs sharing the {self.axis} axis must agree")
        padded = tuple(pad_rows(t, bucket, self._inputs[i]) if i in self._inputs else t for i, t in enumerate(inputs))
        outputs = model(*padded)
        for i in model.mutated:
            if i in self._inputs:
                inputs[i].copy_(padded[i].narrow(self._inputs[i], 0, n))
        leaves, spec = flatten(outputs)
        for i, d in self._outputs.items():
            leaves[i] = leaves[i].narrow(d, 0, n)
        return unflatten(spec, leaves)

    def __repr__(self):
        return (f"<Model {self.name} on {self.device}, {self.axis} buckets {list(self.sizes)}"
                f"{' padded' if self.pad else ''}>")
