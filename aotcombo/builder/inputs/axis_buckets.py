"""Buckets on a named axis (``--buckets seq=128,256,512 [--pad]``): a specialization per size.

The axis is one the model file names (``get_dynamic_axes()``, ``axes.py``); each bucket's
example inputs are the example inputs cut or tiled along the axis's dims to its size.

Padding (``--pad``) must be exact: a size between buckets runs in the next larger one with
the inputs padded with zeros along the axis (token id 0, attention mask 0), and the outputs
that carry the axis cut back. That is right only where the model's own mask makes the
padded positions invisible to the real ones (BERT's or T5's attention mask), and where
padding writes no state the real positions read (a KV cache written at the padded positions
would be), so the build checks it on the CPU in eager mode: for every bucket but the
smallest, the model run one short of the bucket must give the outputs, cut back, and the
state (the buffers forward updates) of the model run on those inputs padded to the bucket,
to the dtype's tolerance. A model that fails it is not built with ``--pad``. The check is
necessary, not a proof: it tries one size per bucket.
"""

from __future__ import annotations

import dataclasses

import torch

from ...errors import UsageError
from ...runtime.buckets import pad_rows
from ...runtime.manifest import Buckets
from .axes import AXES_FORM, declared_dims, resized
from .modelfile import buffers_kept
from .shapes import tolerance


def bucket_inputs(model, shapes: Buckets, inputs: tuple, names: tuple[str, ...], dynamic_axes,
                  reporter) -> tuple[dict, Buckets]:
    """The example inputs of every bucket, ``{size: inputs}``, and ``shapes`` with the axis's
    input dims (and, padded, its output dims) filled in."""
    if dynamic_axes is None:
        raise UsageError(f"--buckets {shapes.axis}=...: the model file names no dynamic axes",
                         fix=f"define get_dynamic_axes() in the model file returning {AXES_FORM}, or bucket the "
                         "batch with --batch")
    declared = declared_dims(dynamic_axes, names, inputs)
    if shapes.axis not in declared:
        raise UsageError(f"--buckets {shapes.axis}: the model's dynamic axes are {', '.join(declared) or 'none'}",
                         fix="pass --buckets with an axis the model names, or name it in get_dynamic_axes()")
    dims = tuple(declared[shapes.axis])
    by_size = {size: resized(inputs, dims, size) for size in shapes.sizes}
    out_dims: tuple = ()
    if shapes.pad:
        with reporter.stage(f"check that padding {shapes.axis} keeps the outputs", timing_key="load"):
            out_dims = check_axis_padding(model, by_size, shapes.axis, dims)
    return by_size, dataclasses.replace(shapes, dims=dims, out_dims=out_dims)


def _run(model, inputs: tuple) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The model's flat outputs and, after the call, its buffers (the state it updates)."""
    with torch.no_grad(), buffers_kept(model):
        out = model(*inputs)
        state = [b.detach().clone() for b in model.buffers()]
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)], state


def _axis_dims(outputs: dict[int, list[torch.Tensor]]) -> tuple[tuple[int, int], ...]:
    """(output, dim) of every output with a dim that follows the axis's size at every size."""
    sizes = sorted(outputs)
    found = []
    for i, t in enumerate(outputs[sizes[0]]):
        for d in range(t.dim()):
            if all(outputs[s][i].dim() == t.dim() and outputs[s][i].shape[d] == s for s in sizes):
                found.append((i, d))
                break
    return tuple(found)


def check_axis_padding(model, by_size: dict[int, tuple], axis: str, dims) -> tuple[tuple[int, int], ...]:
    """Check that zero padding along ``axis`` leaves the outputs, cut back, and the state
    unchanged (see the module docstring); returns the outputs' dims that carry the axis."""
    sizes = sorted(by_size)
    probe = sorted(set(sizes) | {max(2, sizes[0] - 1)})  # two sizes at least, to tell the outputs' dims apart
    outputs = {s: _run(model, resized(by_size[sizes[-1]], dims, s))[0] for s in probe}
    out_dims = _axis_dims(outputs)
    if not out_dims:
        raise UsageError(f"--pad: no output of the model carries the {axis} axis, so padding cannot be cut off",
                         fix=f"build without --pad (then every {axis} size must be one of --buckets)")
    for size in sizes:
        short = size - 1
        if short < 1:
            continue
        small = resized(by_size[size], dims, short)
        padded = list(small)
        for i, d in dims:
            padded[i] = pad_rows(small[i], size, d)
        (expected, state), (got, padded_state) = _run(model, small), _run(model, tuple(padded))
        for i, d in out_dims:
            rtol, atol = tolerance(expected[i].dtype)
            if not torch.allclose(got[i].narrow(d, 0, short).float(), expected[i].float(), rtol=rtol, atol=atol):
                raise UsageError(
                    f"--pad: output {i} at {axis} {short} changes when the inputs are padded with zeros to {size}: "
                    f"the model lets the padded positions reach the real ones (no mask hides them)",
                    fix=f"build without --pad, listing every {axis} size the model will see in --buckets, or "
                    f"use --dynamic {axis}=MIN:MAX")
        for before, after in zip(state, padded_state):
            rtol, atol = tolerance(before.dtype)
            if before.shape != after.shape or not torch.allclose(after.float(), before.float(), rtol=rtol, atol=atol):
                raise UsageError(
                    f"--pad: the model's state (a buffer forward updates, such as a KV cache) differs when the "
                    f"inputs are padded with zeros along {axis}: padding would write it",
                    fix=f"build without --pad, or use --dynamic {axis}=MIN:MAX")
    return out_dims
