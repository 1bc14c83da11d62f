"""A package's inputs: their specs, the per-call input check, static buffers.

An ``InputSpec`` is a manifest ``Input`` with its dtype as a ``torch.dtype``; in a
package with a dynamic batch the batch dim of a shape is ``BATCH``, and every such dim
must hold the same size, inside the built range. ``check_inputs`` finds and names the
first mismatch; ``make_input_check`` returns the per-call input check: one comparison of a
list of per-input tuples with the expected one (and, with a dynamic batch, one range test),
falling back to ``check_inputs`` for the message. (A *guard*, in this runtime, is something
else: what says whether a captured graph may replay on a call's inputs; bound.py.)
"""

from __future__ import annotations

import re
from typing import NamedTuple

import torch

from .manifest import BATCH, Input


class InputSpec(NamedTuple):
    name: str
    dtype: torch.dtype
    shape: tuple  # ints, and BATCH for a dynamic batch dim
    stride: tuple
    align: int  # bytes the data pointer must be a multiple of
    mutated: bool  # the model updates it in place
    direct: bool = False  # only the package's kernels read it: graph mode points them at the caller's tensor

    @classmethod
    def of(cls, i: Input) -> InputSpec:
        return cls(i.name, getattr(torch, i.dtype), tuple(i.shape), tuple(i.stride), i.align, i.mutated, i.direct)

    @property
    def batched(self) -> bool:
        return BATCH in self.shape

    def shape_at(self, batch: int | None) -> tuple[int, ...]:
        return at_batch(self.shape, batch)

    def stride_at(self, batch: int | None) -> tuple[int, ...]:
        return at_batch(self.stride, batch)

    def shown(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"({dims}{',' if len(self.shape) == 1 else ''})"


_EXPRESSION = re.compile(rf"[0-9+*() ]*({BATCH}[0-9+*() ]*)*")


def at_batch(dims: tuple, batch: int | None) -> tuple[int, ...]:
    """Sizes or strides at a batch size: ``BATCH`` is the batch itself, a text such as
    ``"64*batch"`` (a stride after a dim that depends on it) an expression of it."""
    if all(isinstance(d, int) for d in dims):
        return dims
    if batch is None:
        raise ValueError(f"{dims} depend on the batch size, and none was given")
    return tuple(d if isinstance(d, int) else batch if d == BATCH else _evaluate(d, batch) for d in dims)


def _evaluate(text: str, batch: int) -> int:
    if not _EXPRESSION.fullmatch(text):
        raise ValueError(f"cannot evaluate the size {text!r}: the package is damaged or was not built by this aotcombo")
    return int(eval(text, {"__builtins__": {}}, {BATCH: batch}))  # digits, + * ( ) and batch only


def check_inputs(specs: list[InputSpec], inputs: tuple, device: torch.device | None = None,
                 batch_range: tuple[int, int] | None = None, exact_layout: bool = True) -> bool:
    """Raise TypeError (type, dtype) or ValueError (the rest) unless the inputs match the specs.

    ``device=None`` skips the device check; ``batch_range``: the (min, max) of a dynamic batch.
    ``exact_layout=False`` accepts any strides and alignment (a loaded model copies such inputs
    into the layout it was built for). Returns whether every input has the spec's strides and
    alignment.
    """
    exact = True
    batch = None
    if len(inputs) != len(specs):
        raise ValueError(f"expected {len(specs)} inputs ({', '.join(s.name for s in specs)}), got {len(inputs)}")
    for i, (spec, t) in enumerate(zip(specs, inputs)):
        what = f"input {i} ({spec.name!r})"
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
        if device is not None and t.device != device:
            raise ValueError(f"{what}: expected device {device}, got {t.device}")
        if t.dtype != spec.dtype:
            raise TypeError(f"{what}: expected dtype {spec.dtype}, got {t.dtype}")
        if len(t.shape) != len(spec.shape) or any(e != BATCH and e != d for e, d in zip(spec.shape, t.shape)):
            raise ValueError(f"{what}: expected shape {spec.shown()}, got {tuple(t.shape)}")
        if spec.batched:
            size = t.shape[spec.shape.index(BATCH)]
            low, high = batch_range or (0, size)
            if not low <= size <= high:
                raise ValueError(f"{what}: batch size {size} is outside the range {low}..{high} the package was "
                                 f"built for: rebuild with --dynamic batch={min(low, size)}:{max(high, size)}")
            if batch is not None and size != batch[1]:
                raise ValueError(f"{what}: batch size {size}, but input {batch[0]} has {batch[1]}: "
                                 "batched inputs must agree")
            batch = batch or (i, size)
        stride = spec.stride_at(batch[1] if batch else None)
        if not same_layout(t.shape, t.stride(), stride):
            if exact_layout:
                raise ValueError(f"{what}: expected stride {stride}, got {t.stride()}")
            exact = False
        if t.data_ptr() % spec.align:
            if exact_layout:
                raise ValueError(f"{what}: expected data_ptr aligned to {spec.align} bytes, got one "
                                 f"{t.data_ptr() % spec.align} bytes past (storage offset {t.storage_offset()})")
            exact = False
    return exact


def same_layout(shape, got: tuple, expected: tuple) -> bool:
    """Whether strides ``got`` address a tensor of ``shape`` as ``expected`` do: a dim of size
    1 is only ever indexed at 0, so its stride does not matter (``t[:, -1:]`` of a [b, n]
    tensor is laid out as a contiguous [b, 1] one)."""
    return got == expected or all(g == e for n, g, e in zip(shape, got, expected) if n != 1) or 0 in shape


def make_input_check(specs: list[InputSpec], device: torch.device, batch_range: tuple[int, int] | None = None,
                     exact_layout: bool = True):
    """``input_check(inputs) -> exact``: check_inputs(specs, inputs, device, batch_range, exact_layout),
    cheap when they match exactly."""
    if any(s.batched for s in specs):
        return _dynamic_input_check(specs, device, batch_range, exact_layout)
    expected = [(s.dtype, s.shape, s.stride, _index(device), 0) for s in specs]
    masks, n = [s.align - 1 for s in specs], len(specs)

    def input_check(inputs: tuple) -> bool:
        try:
            exact = len(inputs) == n and [(t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() & mask)
                                          for t, mask in zip(inputs, masks)] == expected
        except Exception:  # noqa: BLE001 (not a tensor, or a strideless one: check_inputs names it)
            exact = False
        return exact or check_inputs(specs, inputs, device, exact_layout=exact_layout)

    return input_check


def _dynamic_input_check(specs: list[InputSpec], device: torch.device, batch_range, exact_layout: bool):
    """The input check of a package with a dynamic batch: the expected (dtype, shape, strides,
    device, alignment) of every input at the batch size of the first batched one, made once
    per size seen."""
    low, high = batch_range or (1, 1 << 62)
    first = next(i for i, s in enumerate(specs) if s.batched)
    dim, masks, n = specs[first].shape.index(BATCH), [s.align - 1 for s in specs], len(specs)
    expected: dict[int, list] = {}

    def expected_at(size: int) -> list:
        if size not in expected:
            if len(expected) >= 256:
                expected.clear()
            expected[size] = [(s.dtype, s.shape_at(size), s.stride_at(size), _index(device), 0) for s in specs]
        return expected[size]

    def input_check(inputs: tuple) -> bool:
        try:
            size = inputs[first].shape[dim]
            exact = low <= size <= high and len(inputs) == n and [
                (t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() & mask)
                for t, mask in zip(inputs, masks)] == expected_at(size)
        except Exception:  # noqa: BLE001 (check_inputs names it)
            exact = False
        return exact or check_inputs(specs, inputs, device, batch_range, exact_layout)

    return input_check


_MISSING = object()


def _index(device: torch.device) -> int:
    """What ``Tensor.get_device()`` gives for a tensor on ``device`` (-1: the CPU)."""
    return -1 if device.type == "cpu" else device.index


def bind(names: list[str], args: tuple, named: dict) -> tuple:
    """The inputs in order from a call by position and keyword (``names``: forward's; those
    that are not identifiers, such as ``xs[0]`` of a ``*xs``, go by position only)."""
    if len(args) > len(names):
        raise TypeError(f"expected {len(names)} inputs ({', '.join(names)}), got {len(args)} by position")
    values = list(args) + [_MISSING] * (len(names) - len(args))
    for key, value in named.items():
        i = names.index(key) if key in names and key.isidentifier() else -1
        if i < 0:
            raise TypeError(f"unexpected input {key!r}: the model's inputs are {', '.join(names)}")
        if i < len(args):
            raise TypeError(f"input {key!r} given by position and by name")
        values[i] = value
    missing = [name for name, value in zip(names, values) if value is _MISSING]
    if missing:
        raise TypeError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    return tuple(values)


def allocate(specs: list[InputSpec], device: torch.device, batch: int | None = None) -> tuple:
    """Zeroed tensors matching the specs, a dynamic batch dim of size ``batch`` (fresh
    allocations are 512-byte aligned)."""
    return tuple(torch.empty_strided(s.shape_at(batch), s.stride_at(batch), dtype=s.dtype,
                                     device=device).zero_()
                 for s in specs)
