"""Several batch sizes in one package: make each size's example inputs, find the batched
inputs and outputs, and check that padding is safe.

``specialize(model, inputs, shapes, make_inputs)`` returns the example inputs of every
specialization to build (``{batch size or None: inputs}``) and the shape mode with its
batched inputs and outputs filled in (the modes themselves: ``aotcombo.runtime.manifest``;
their options are checked in ``inputs/options.py``).

The batch dimension is dim 0. Which inputs carry it is found, not declared: the example
inputs are made at two batch sizes, and an input is batched when its dim 0 follows the
batch size while its other dims stay put; every other input must be the same at every
size. Example inputs per size come from ``get_example_inputs(batch=N)`` when the model
file's function takes a ``batch`` argument, else from the default example inputs, cut or
tiled along dim 0 of every input whose dim 0 equals the first input's (tiling repeats
real example rows, so token ids and masks stay valid).

Padding (``--pad``): a size between buckets runs in the next larger bucket, its inputs
padded with zero rows and its batched outputs cut back. That is right only when rows do
not interact (no batch statistics, no attention or reductions across dim 0), so the build
checks it on the CPU in eager mode: for every bucket but the smallest, the model run on a
batch one row short of the bucket must equal the model run on that batch padded to the
bucket, cut back, to the dtype's tolerance. A model that fails it is not built with
``--pad``. The check is necessary, not a proof: it tries one size per bucket.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import torch

from ...errors import UsageError
from ...runtime.buckets import pad_rows
from ...runtime.manifest import BATCH, Dynamic, ShapeMode, Static
from .axes import trace_inputs
from .modelfile import buffers_kept
from .signature import input_names

def cut_or_tile(inputs: tuple, batched: Sequence[int], size: int) -> tuple:
    """The example inputs with dim 0 of the ``batched`` ones made ``size``: the first
    ``size`` rows, repeated from the start when there are fewer."""
    out = list(inputs)
    for i in batched:
        t = inputs[i]
        repeats = -(-size // t.shape[0])
        out[i] = t.repeat(repeats, *[1] * (t.dim() - 1))[:size].contiguous() if repeats > 1 else t[:size].contiguous()
    return tuple(out)


def default_batched(inputs: tuple) -> list[int]:
    """Inputs taken as batched when the model file cannot make inputs per size: those whose
    dim 0 equals the first input's."""
    if not inputs or inputs[0].dim() == 0:
        raise UsageError("--batch/--dynamic: the first example input has no dim 0 to take as the batch",
                         fix="make the first input the batched one, or let get_example_inputs take batch=N")
    first = inputs[0].shape[0]
    return [i for i, t in enumerate(inputs) if t.dim() > 0 and t.shape[0] == first]


def batched_inputs(by_size: dict[int, tuple]) -> list[int]:
    """Positions of the inputs whose dim 0 is the batch, checked across every size."""
    sizes = sorted(by_size)
    if len(sizes) < 2:
        raise ValueError("need example inputs at two sizes at least")
    reference = by_size[sizes[0]]
    batched = []
    for i, t in enumerate(reference):
        shapes = {s: tuple(by_size[s][i].shape) for s in sizes}
        if all(shape == shapes[sizes[0]] for shape in shapes.values()):
            continue
        if not all(len(shape) > 0 and shape[0] == s and shape[1:] == shapes[sizes[0]][1:]
                   for s, shape in shapes.items()):
            raise UsageError(
                f"example input {i} changes shape with the batch size but not as dim 0 = batch: "
                + ", ".join(f"batch {s}: {list(shape)}" for s, shape in shapes.items()),
                fix="make dim 0 of each batched input the batch size, and leave the other dims unchanged")
        batched.append(i)
    if not batched:
        raise UsageError("no example input changes with the batch size",
                         fix="let get_example_inputs(batch=N) return inputs whose dim 0 is N")
    for s in sizes:
        if len(by_size[s]) != len(reference):
            raise UsageError(f"get_example_inputs(batch={s}) returns {len(by_size[s])} inputs, "
                             f"batch={sizes[0]} {len(reference)}", fix="return the same inputs at every size")
    return batched


def example_inputs_by_size(inputs: tuple, sizes: Sequence[int],
                           make: Callable[[int], tuple] | None) -> tuple[dict[int, tuple], list[int]]:
    """Example inputs for every size (``make(size)`` if given, else cut or tiled from
    ``inputs``), and the positions of the batched inputs."""
    probe = sorted(set(sizes) | {max(sizes) + 1})  # two sizes at least, to tell batched inputs apart
    if make is not None:
        by_size = {s: make(s) for s in probe}
        batched = batched_inputs(by_size)
    else:
        batched = default_batched(inputs)
        by_size = {s: cut_or_tile(inputs, batched, s) for s in probe}
    return {s: by_size[s] for s in sizes}, batched


def batched_outputs(outputs_by_size: dict[int, list[torch.Tensor]]) -> list[int]:
    """Positions of the flat outputs whose dim 0 follows the batch size."""
    sizes = sorted(outputs_by_size)
    n = len(outputs_by_size[sizes[0]])
    return [i for i in range(n)
            if all(outputs_by_size[s][i].dim() > 0 and outputs_by_size[s][i].shape[0] == s for s in sizes)]


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing two runs of one model in ``dtype``."""
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-2, 2e-2
    if dtype.is_floating_point:
        return 1e-4, 1e-5
    return 0.0, 0.0


def check_padding(run: Callable[[tuple], list[torch.Tensor]], by_size: dict[int, tuple],
                  batched: Sequence[int]) -> list[int]:
    """Check that padding a batch up to a bucket leaves its rows' outputs unchanged (see the
    module docstring); returns the batched outputs' positions. ``run(inputs)``: the flat
    outputs of the eager model."""
    sizes = sorted(by_size)
    outputs = {s: run(by_size[s]) for s in sizes}
    if len(sizes) == 1:
        out_batched = [i for i, t in enumerate(outputs[sizes[0]]) if t.dim() and t.shape[0] == sizes[0]]
    else:
        out_batched = batched_outputs(outputs)
    if not out_batched:
        raise UsageError("--pad: no output of the model has the batch as dim 0, so padded rows cannot be cut off",
                         fix="build without --pad (then every size must be one of --batch)")
    for size in sizes:
        short = size - 1
        if short < 1:
            continue
        small = cut_or_tile(by_size[size], batched, short)
        padded = tuple(pad_rows(t, size) if i in batched else t for i, t in enumerate(small))
        expected, got = run(small), run(padded)
        for i in out_batched:
            rtol, atol = tolerance(expected[i].dtype)
            if not torch.allclose(got[i][:short].float(), expected[i].float(), rtol=rtol, atol=atol):
                raise UsageError(
                    f"--pad: output {i} of a batch of {short} changes when the batch is padded to {size} "
                    "with zero rows: the model mixes rows along dim 0 (batch statistics, attention or a "
                    "reduction across the batch)",
                    fix="build without --pad, listing every batch size the model will see in --batch")
    return out_batched


def _flat_eager(model):
    """``run(inputs)``: the model's outputs in eager mode on the CPU, as a flat list of tensors."""

    def run(inputs):
        with torch.no_grad(), buffers_kept(model):
            out = model(*inputs)
        return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]

    return run


def specialize(model, inputs: tuple, shapes: ShapeMode, make_inputs, reporter,
               dynamic_axes=None) -> tuple[dict, ShapeMode]:
    """The example inputs to build, ``{batch size or None: inputs}``, and ``shapes`` with
    its batched inputs (and, for padded buckets, outputs) found. ``dynamic_axes``: the
    model's named axes (``axes.py``), for ``Dynamic`` shapes."""
    if isinstance(shapes, Static):
        return {None: inputs}, shapes
    if isinstance(shapes, Dynamic):
        def find_batch(size: int):
            by_size, batched = example_inputs_by_size(inputs, [size, size + 1], make_inputs)
            return by_size[size], batched

        traced, shapes = trace_inputs(shapes, inputs, input_names(model, len(inputs)), dynamic_axes, find_batch)
        return {None: traced}, shapes
    names = input_names(model, len(inputs))
    if shapes.axis != BATCH:
        from .axis_buckets import bucket_inputs

        by_size, shapes = bucket_inputs(model, shapes, inputs, names, dynamic_axes, reporter)
    else:
        by_size, batched = example_inputs_by_size(inputs, shapes.sizes, make_inputs)
        outputs: list[int] = []
        if shapes.pad:
            with reporter.stage("check that padding the batch keeps each row's outputs", timing_key="load"):
                outputs = check_padding(_flat_eager(model), by_size, batched)
        shapes = dataclasses.replace(shapes, batched_inputs=tuple(batched), batched_outputs=tuple(outputs))
    return _dynamic_in_buckets(by_size, shapes, names, dynamic_axes) if shapes.dynamic else (by_size, shapes)


def _dynamic_in_buckets(by_size: dict, shapes, names, dynamic_axes) -> tuple[dict, ShapeMode]:
    """Buckets whose other axes are dynamic: each bucket's example inputs resized to trace
    those axes at, and the axes with their dims."""
    traced, dynamic = {}, None
    for size, inputs in by_size.items():
        def find_batch(batch: int, inputs=inputs):
            cut, batched = example_inputs_by_size(inputs, [batch, batch + 1], None)
            return cut[batch], batched

        traced[size], dynamic = trace_inputs(shapes.dynamic, inputs, names, dynamic_axes, find_batch)
    return traced, dataclasses.replace(shapes, dynamic=dynamic)
