"""What one ``load()`` computes with: its weights, and the state that forward updates.

Weights come from the package (loaded once per device) or from the caller
(``load(weights=model.state_dict())``: required for a package built with ``--weights
external``, else it replaces the packaged tensors of those names). The buffers forward
updates in place (a KV cache: the manifest's ``weights.state``) are the model's *state*:
each load holds its own copies, started from the weights' values, updated by every call
(in graph mode by the replay itself, no copies), unless ``load(state=other.state())``
shares another model's (a prefill and a decode package over one cache).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .manifest import Manifest
from .parallel import part_slice, rank_slice, whole_shape

# A combined weight's part that is zeros, ``zeros:<rows>`` (the bias a linear of the group lacks:
# builder/kernels/linear/combine.py): made at load, never given.
ZEROS = "zeros:"


class State:
    """The buffers a loaded model's forward updates, by the model's names."""

    def __init__(self, tensors: dict[str, torch.Tensor], initial: dict[str, torch.Tensor]):
        self.tensors, self._initial = tensors, initial

    def reset(self) -> None:
        """Put the values the model was loaded with back."""
        with torch.no_grad():
            for name, tensor in self.tensors.items():
                tensor.copy_(self._initial[name])

    def snapshot(self) -> list[torch.Tensor]:
        return [t.clone() for t in self.tensors.values()]

    def restore(self, saved: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for tensor, value in zip(self.tensors.values(), saved, strict=True):
                tensor.copy_(value)


def weights_for_load(manifest: Manifest, packaged: dict[str, torch.Tensor], device: torch.device,
                     given: Mapping[str, torch.Tensor] | None = None,
                     shared: Mapping[str, torch.Tensor] | None = None,
                     rank: int | None = None) -> tuple[list[torch.Tensor], State]:
    """The program's weights in program order, and the load's state. ``rank``: a
    tensor-parallel package's (``given`` holds whole tensors: this rank's slices are taken)."""
    given = {} if given is None else given
    if not isinstance(given, Mapping):
        raise TypeError(f"load(): weights must be a mapping of names to tensors (a state_dict), "
                        f"got {type(given).__name__}")
    missing = [name for t in manifest.weights.tensors if t.external for name in (t.parts or (t.name,))
               if name not in given and not name.startswith(ZEROS)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(f"package {manifest.name} was built with --weights external: load(weights=...) must give "
                         f"{len(missing)} tensor(s) it lacks: {shown}; pass the state_dict() of the model it "
                         "was built from")
    sources, moved = {}, {}
    for t in manifest.weights.tensors:
        if t.parts and (t.external or any(p in given for p in t.parts)):
            sources[t.name] = _combined(t, given, packaged, device, rank, manifest.world_size)
        elif t.name in given:
            value = _checked(f"weights[{t.name!r}]", given[t.name], t.dtype, whole_shape(t, manifest.world_size))
            sources[t.name] = _moved(value if rank is None else rank_slice(t, value, rank, manifest.world_size),
                                     device, moved)
        else:
            sources[t.name] = packaged[t.name]
    live = {}
    for name in manifest.weights.state:
        if shared is not None:
            if name not in shared:
                raise ValueError(f"load(state=...) lacks {name!r}, a buffer {manifest.name} updates; pass the "
                                 "state() of a model built from the same module")
            tensor = _checked(f"state[{name!r}]", shared[name], str(sources[name].dtype).removeprefix("torch."),
                              tuple(sources[name].shape))
            if tensor.device != device:
                raise ValueError(f"state[{name!r}] is on {tensor.device}; this model loads on {device}")
            live[name] = tensor
        else:
            live[name] = sources[name].clone()
    weights = [live.get(t.name, sources[t.name]) for t in manifest.weights.tensors]
    return weights, State(live, {name: sources[name] for name in live})


def view_key(t: torch.Tensor) -> tuple | None:
    """What makes two tensors one: the same elements of the same storage, alike viewed (tied
    weights: an LM head and its embedding, two names of one tensor in a state_dict); None for
    a tensor without storage to tell (meta)."""
    pointer = t.untyped_storage().data_ptr()
    return (pointer, t.device, t.dtype, t.storage_offset(), tuple(t.shape), t.stride()) if pointer else None


def _moved(value: torch.Tensor, device: torch.device, moved: dict) -> torch.Tensor:
    """``value`` on ``device``, moved once per ``view_key``: tied weights stay one tensor there."""
    key = view_key(value)
    if key is None:
        return value.to(device)
    if key not in moved:
        moved[key] = value.to(device)
    return moved[key]


def _combined(t, given: Mapping[str, torch.Tensor], packaged: dict, device: torch.device, rank: int | None,
              world: int) -> torch.Tensor:
    """A weight made of several of the model's tensors (``t.parts``, concatenated along dim 0):
    the caller's where given (this rank's slice of each, tensor parallel), else the packaged rows."""
    pieces, start = [], 0
    for name, rows in zip(t.parts, t.part_rows, strict=True):
        if name.startswith(ZEROS):
            pieces.append(torch.zeros(rows, *t.shape[1:], dtype=getattr(torch, t.dtype), device=device))
        elif name in given:
            value = _checked(f"weights[{name!r}]", given[name], t.dtype, whole_shape(t, world, rows))
            pieces.append((value if rank is None else part_slice(t, value, rows, rank, world)).to(device))
        else:
            pieces.append(packaged[t.name][start:start + rows])
        start += rows
    return torch.cat(pieces)


def _checked(what: str, value, dtype: str, shape: tuple) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(value).__name__}")
    if str(value.dtype).removeprefix("torch.") != dtype or tuple(value.shape) != tuple(shape):
        raise ValueError(f"{what}: expected {dtype} {list(shape)}, got {str(value.dtype).removeprefix('torch.')} "
                         f"{list(value.shape)}")
    return value
