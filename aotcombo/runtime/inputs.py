"""A package's inputs: their specs from the manifest, the guards that check them, static buffers.

A spec is ``(name, dtype, shape, stride, align)``. ``check_inputs`` finds and names the first
mismatch; ``make_guard`` returns the per-call check: one comparison of a list of per-input
tuples with the expected one, falling back to ``check_inputs`` for the message.
"""

from __future__ import annotations

import torch


def input_specs(inputs: list[dict]) -> list[tuple]:
    """The manifest's inputs as (name, dtype, shape, stride, align) tuples for check_inputs."""
    return [(s["name"], getattr(torch, s["dtype"]), tuple(s["shape"]), tuple(s["stride"]), s.get("align", 1))
            for s in inputs]


def check_inputs(specs: list[tuple], inputs: tuple, device: torch.device | None = None) -> None:
    """Raise TypeError (type, dtype) or ValueError (the rest) unless the inputs match the specs.

    ``device=None`` skips the device check.
    """
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
        if t.shape != shape:
            raise ValueError(f"{what}: expected shape {shape}, got {tuple(t.shape)}")
        if t.stride() != stride:
            raise ValueError(f"{what}: expected stride {stride}, got {t.stride()}")
        if t.data_ptr() % align:
            raise ValueError(f"{what}: expected data_ptr aligned to {align} bytes, got one {t.data_ptr() % align} "
                             f"bytes past (storage offset {t.storage_offset()})")


def make_guard(specs: list[tuple], device: torch.device):
    """``guard(inputs)``: check_inputs(specs, inputs, device), cheap when they match."""
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


def allocate(specs: list[tuple], device: torch.device) -> tuple:
    """Zeroed tensors matching the specs (fresh allocations are 512-byte aligned)."""
    return tuple(torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()
                 for _, dtype, shape, stride, _ in specs)
