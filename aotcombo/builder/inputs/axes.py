"""Named dynamic axes: which input dims carry each, and the example inputs to trace them at.

A model file names its axes as ``torch.onnx.export``'s ``dynamic_axes`` does, by forward's
input names: ``get_dynamic_axes()`` returning ``{"input_ids": {0: "batch", 1: "seq"},
"attention_mask": {0: "batch", 1: "seq"}}`` (the Python API takes ``dynamic_axes=``).
``--dynamic batch=1:32,seq=1:512`` then makes those dims symbolic, each axis in its range.
Without such a declaration the one axis a build may make dynamic is ``batch``, dim 0 of the
inputs found to follow the batch size (``shapes.py``).

``trace_inputs(...)`` returns the example inputs to trace at and the ``Dynamic`` with each
axis's dims filled in. Each axis is traced at a size inside its range, 2 or more (torch
specialises sizes 0 and 1) and below its top, and the axes at different sizes (two axes
of one size could be taken for one): the example inputs are cut or tiled along the axis's
dims to reach it (tiling repeats real rows and columns, so token ids and masks stay valid).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from ...errors import UsageError
from ...runtime.manifest import BATCH, Axis, Dynamic

AXES_FORM = "{input name: {dim: axis name}}, as torch.onnx.export's dynamic_axes"


def declared_dims(dynamic_axes, names: tuple[str, ...], inputs: tuple) -> dict[str, list[tuple[int, int]]]:
    """``dynamic_axes`` (by input name) as axis -> [(flat input, dim)], checked."""
    if not isinstance(dynamic_axes, dict):
        raise UsageError(f"the model's dynamic axes are a {type(dynamic_axes).__name__}, not a dict",
                         fix=f"return {AXES_FORM}")
    dims: dict[str, list[tuple[int, int]]] = {}
    for name, axes in dynamic_axes.items():
        if name not in names:
            raise UsageError(f"the model's dynamic axes name input {name!r}, which forward does not take",
                             fix=f"name forward's inputs: {', '.join(names)}")
        if not isinstance(axes, dict):
            raise UsageError(f"the dynamic axes of input {name!r} are a {type(axes).__name__}, not a dict",
                             fix=f"return {AXES_FORM}, e.g. {{{name!r}: {{0: 'batch', 1: 'seq'}}}}")
        i = names.index(name)
        for dim, axis in axes.items():
            if not isinstance(dim, int) or not -inputs[i].dim() <= dim < inputs[i].dim():
                raise UsageError(f"the dynamic axes of input {name!r} name dim {dim!r}, but it has "
                                 f"{inputs[i].dim()} dims", fix=f"return {AXES_FORM}")
            if not isinstance(axis, str) or not axis.isidentifier():
                raise UsageError(f"the dynamic axes of input {name!r} call dim {dim} {axis!r}",
                                 fix="name each axis with an identifier, such as batch or seq")
            dims.setdefault(axis, []).append((i, dim % inputs[i].dim()))
    return dims


def trace_inputs(shapes: Dynamic, inputs: tuple, names: tuple[str, ...], dynamic_axes,
                 find_batch: Callable[[int], tuple[tuple, list[int]]]) -> tuple[tuple, Dynamic]:
    """The example inputs to trace ``shapes``' axes at, and ``shapes`` with each axis's dims.
    ``find_batch(size)``: the example inputs at batch ``size`` and the batched inputs, for a
    model that does not declare its axes."""
    if dynamic_axes is None:
        unnamed = [a.name for a in shapes.axes if a.name != BATCH]
        if unnamed:
            raise UsageError(f"--dynamic {unnamed[0]}: the model file names no dynamic axes, so only batch "
                             "(dim 0) can be dynamic",
                             fix=f"define get_dynamic_axes() in the model file returning {AXES_FORM}, e.g. "
                             "{'input_ids': {0: 'batch', 1: 'seq'}}")
        axis = shapes.axes[0]
        traced, batched = find_batch(_first_size(axis))
        return traced, Dynamic(axes=(dataclasses.replace(axis, dims=tuple((i, 0) for i in batched)),))
    declared = declared_dims(dynamic_axes, names, inputs)
    axes, used = [], set()
    for axis in shapes.axes:
        if axis.name not in declared:
            raise UsageError(f"--dynamic {axis.name}: the model's dynamic axes are {', '.join(declared) or 'none'}",
                             fix="pass --dynamic with the axes the model names, or name it in get_dynamic_axes()")
        dims = tuple(declared[axis.name])
        if axis.name == BATCH and _batch_only(dims):
            inputs, _ = find_batch(_first_size(axis))
        size = _size_for(axis, _size_along(inputs, dims, axis.name, names), used)
        inputs = resized(inputs, dims, size)
        used.add(size)
        axes.append(Axis(axis.name, axis.min, axis.max, dims))
    return inputs, Dynamic(axes=tuple(axes))


def _first_size(axis: Axis) -> int:
    return min(max(2, axis.min), axis.max - 1) if axis.max > 2 else 2


def _batch_only(dims) -> bool:
    return all(d == 0 for _, d in dims)


def _size_along(inputs: tuple, dims, axis: str, names) -> int:
    sizes = {(i, d): inputs[i].shape[d] for i, d in dims}
    if len(set(sizes.values())) > 1:
        shown = ", ".join(f"{names[i]} dim {d}: {s}" for (i, d), s in sizes.items())
        raise UsageError(f"the example inputs disagree on the size of axis {axis} ({shown})",
                         fix="make the example inputs the same size along each axis")
    return next(iter(sizes.values()))


def _size_for(axis: Axis, example: int, used: set) -> int:
    """A size inside the axis's range, 2 or more, below the top where it can be, not one an
    axis before it is traced at; the example's own if it is one."""
    low, high = max(2, axis.min), axis.max - 1 if axis.max > 2 else axis.max
    size = min(max(example, low), high)
    for candidate in [size, *range(size + 1, high + 1), *range(size - 1, low - 1, -1)]:
        if candidate not in used:
            return candidate
    return size


def resized(inputs: tuple, dims, size: int) -> tuple:
    """``inputs`` with each of ``dims`` cut or tiled to ``size``."""
    out = list(inputs)
    for i, d in dims:
        out[i] = cut_or_tile_along(out[i], d, size)
    return tuple(out)


def cut_or_tile_along(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """``t`` with dim ``dim`` made ``size``: its first ``size`` entries, repeated from the
    start when there are fewer."""
    if t.shape[dim] == size:
        return t
    if t.shape[dim] == 0:
        raise UsageError(f"an example input is empty along dim {dim}, which cannot be tiled to {size}",
                         fix="give example inputs with at least one entry along each dynamic axis")
    repeats = -(-size // t.shape[dim])
    if repeats > 1:
        t = t.repeat(*[repeats if k == dim else 1 for k in range(t.dim())])
    return t.narrow(dim, 0, size).contiguous()
