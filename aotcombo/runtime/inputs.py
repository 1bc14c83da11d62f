"""A package's inputs: their specs from the manifest, the guards that check them, static buffers.

A spec is ``(name, dtype, shape, stride, align)``; in a package with a dynamic batch the
batch dim of a shape is None, and every such dim must hold the same size, inside the
built range. ``check_inputs`` finds and names the first mismatch; ``make_guard`` returns the
per-call check: one comparison of a list of per-input tuples with the expected one (and,
with a dynamic batch, one range test), falling back to ``check_inputs`` for the message.
"""

from __future__ import annotations

import torch


def input_specs(inputs: list[dict]) -> list[tuple]:
    """The manifest's inputs as (name, dtype, shape, stride, align) tuples for check_inputs."""
    return [(s["name"], getattr(torch, s["dtype"]), tuple(None if d == "batch" else d for d in s["shape"]),
             tuple(s["stride"]), s.get("align", 1)) for s in inputs]


def check_inputs(specs: list[tuple], inputs: tuple, device: torch.device | None = None,
                 batch_range: tuple[int, int] | None = None) -> None:
    """Raise TypeError (type, dtype) or ValueError (the rest) unless the inputs match the specs.

    ``device=None`` skips the device check; ``batch_range``: the (min, max) of a dynamic batch.
    """
    batch = None
    if len(inputs) != len(specs):
        raise ValueError(f"expected {len(specs)} inputs ({', '.join(s[0] for s in specs)}), got {len(inputs)}")
    for i, ((name, dtype, shape, stride, align), t) in enumerate(zip(specs, inputs)):
        what = f"input {i} ({name!r})"
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
        if device is not None and t.device != device:
            raise ValueError(f"{what}: expected device {device}, got {t.device}")
        if t.dtype != dtype:
            raise TypeError(f"{what}: expected dtype {dtype}, got {t.dtype}")
        if len(t.shape) != len(shape) or any(e is not None and e != d for e, d in zip(shape, t.shape)):
            shown = "(" + ", ".join("batch" if e is None else str(e) for e in shape) + ("," if len(shape) == 1 else "") + ")"
            raise ValueError(f"{what}: expected shape {shown}, got {tuple(t.shape)}")
        if None in shape:
            size = t.shape[shape.index(None)]
            low, high = batch_range or (0, size)
            if not low <= size <= high:
                raise ValueError(f"{what}: batch size {size} is outside the range {low}..{high} the package was "
                                 f"built for: rebuild with --dynamic batch={min(low, size)}:{max(high, size)}")
            if batch is not None and size != batch[1]:
                raise ValueError(f"{what}: batch size {size}, but input {batch[0]} has {batch[1]}: "
                                 "batched inputs must agree")
            batch = batch or (i, size)
        if t.stride() != stride:
            raise ValueError(f"{what}: expected stride {stride}, got {t.stride()}")
        if t.data_ptr() % align:
            raise ValueError(f"{what}: expected data_ptr aligned to {align} bytes, got one {t.data_ptr() % align} "
                             f"bytes past (storage offset {t.storage_offset()})")


def make_guard(specs: list[tuple], device: torch.device, batch_range: tuple[int, int] | None = None):
    """``guard(inputs)``: check_inputs(specs, inputs, device, batch_range), cheap when they match."""
    if any(None in shape for _, _, shape, _, _ in specs):
        return _dynamic_guard(specs, device, batch_range)
    expected = [(dtype, shape, stride, device, 0) for _, dtype, shape, stride, _ in specs]
    masks, n = [align - 1 for *_, align in specs], len(specs)

    def guard(inputs: tuple) -> None:
        try:
            if len(inputs) == n and [(t.dtype, t.shape, t.stride(), t.device, t.data_ptr() & mask)
                                     for t, mask in zip(inputs, masks)] == expected:
                return
        except Exception:  # noqa: BLE001 (not a tensor, or a strideless one: check_inputs names it)
            pass
        check_inputs(specs, inputs, device)

    return guard


def _dynamic_guard(specs: list[tuple], device: torch.device, batch_range):
    """The guard of a package with a dynamic batch (dim 0 of the batched inputs)."""
    low, high = batch_range or (1, 1 << 62)
    expected = [(dtype, shape[1:] if shape[:1] == (None,) else shape, stride, device, 0)
                for _, dtype, shape, stride, _ in specs]
    batched = [i for i, (_, _, shape, _, _) in enumerate(specs) if shape[:1] == (None,)]
    first, masks, n = batched[0], [align - 1 for *_, align in specs], len(specs)

    def guard(inputs: tuple) -> None:
        try:
            if len(inputs) == n and [(t.dtype, t.shape[1:] if i in batched else t.shape, t.stride(), t.device,
                                      t.data_ptr() & mask) for i, (t, mask) in enumerate(zip(inputs, masks))] == expected:
                size = inputs[first].shape[0]
                if low <= size <= high and all(inputs[i].shape[0] == size for i in batched):
                    return
        except Exception:  # noqa: BLE001 (check_inputs names it)
            pass
        check_inputs(specs, inputs, device, batch_range)

    return guard


def allocate(specs: list[tuple], device: torch.device, batch: int | None = None) -> tuple:
    """Zeroed tensors matching the specs, a dynamic batch dim of size ``batch`` (fresh
    allocations are 512-byte aligned)."""
    return tuple(torch.empty_strided(tuple(batch if d is None else d for d in shape), stride, dtype=dtype,
                                     device=device).zero_()
                 for _, dtype, shape, stride, _ in specs)
