"""torch decompositions and Inductor layout constraints that fix a dynamic axis to pick a memory
layout, made not to.

``F.interpolate(..., mode="nearest")`` decomposes (``torch._decomp``'s ``_upsample_nearest``)
into an index and a copy to the input's suggested memory format, which on CUDA it then sets to
contiguous below 4 channels ("only use channels_last path when it's faster"). Reading the
channel count there guards on it. DETR interpolates its pixel mask as ``mask[None]``: the batch
is the channel dim, and export refused ``--dynamic batch=1:4`` with "batch <= 3". The heuristic
only changes a channels-last input's layout; a contiguous one stays contiguous either way.
``upsample_without_channel_guard`` reads the count only for a channels-last input: the same
layouts, no guard for the others.

Inductor's layout constraint on the memory-efficient attention (``lowering.sdpa_constraint``) wants
its mask's rows padded to 8 elements. Given a mask already in memory, it compares the mask's
strides with the padded ones: a guard where the key length is a dynamic axis (``Eq(8*s*ceil(s/8),
s**2)``, or ``Mod(s, 8) == 0``). The 2026-12-05 dynamic sweep met it where transformers builds a
decoder's causal mask from the ids (GPT-J, GPT-BigCode, Qwen3-MoE, Llama for sequence
classification): refused at lengths not a multiple of 8. ``padded_attention_masks`` copies such a
mask once into rows padded to ``ceil(keys / 8) * 8`` elements first (a mask not yet in memory is
computed into them), which Inductor then takes as they are: what it does at any length the example
does not share, at every length. The layers' calls that read one mask read one copy (a dynamic
BERT-base had written 12, one a layer, in its embeddings' combo kernel).
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from unittest import mock

import torch
from torch._decomp import decompositions
from torch._prims_common import suggest_memory_format

aten = torch.ops.aten


@decompositions.pw_cast_for_opmath
def _upsample_nearest(input, output_size, scales, exact=False):
    """torch's ``_upsample_nearest`` (as of 2.14), the channel count read after the layout."""
    spatial = decompositions._compute_upsample_nearest_indices(input, output_size, scales, exact=exact)
    result = aten._unsafe_index(input, [None, None] + spatial)
    if result.ndim in (4, 5):
        memory_format = suggest_memory_format(input)
        if (memory_format != torch.contiguous_format and result.ndim == 4 and input.device.type == "cuda"
                and input.shape[1] < 4):
            memory_format = torch.contiguous_format
        result = result.contiguous(memory_format=memory_format)
    return result


def upsample_without_channel_guard():
    """While tracing: nearest upsampling decomposed without a guard on a contiguous input's channels."""
    if not callable(getattr(decompositions, "_compute_upsample_nearest_indices", None)):
        return contextlib.nullcontext()  # another torch: its own decomposition
    return mock.patch.object(decompositions, "_upsample_nearest", _upsample_nearest)


_EFFICIENT = aten._scaled_dot_product_efficient_attention.default
_ALIGNMENT, _BIAS = 8, 3  # sdpa_constraint's alignment; the mask's argument index


def _padded_mask_first(constraint):
    from torch._inductor.virtualized import V

    copies = {}  # (the graph being lowered, the mask's node) -> the padded copy every layer's call reads

    def constrain(fx_node, *args, **kwargs):
        if len(args) > _BIAS and _needs_padded_copy(args[_BIAS], fx_node.args[_BIAS]):
            padded = _padded_like(fx_node.args[_BIAS].meta["val"])
            key = (V.graph, fx_node.args[_BIAS])
            if key not in copies:
                copies[key] = _copy_into(args[_BIAS], padded.stride())
            args = (*args[:_BIAS], copies[key], *args[_BIAS + 1:])
            # what the constraint reads of the node: the mask's traced strides are the copy's
            fx_node = SimpleNamespace(target=fx_node.target, kwargs=fx_node.kwargs, args=(
                *fx_node.args[:_BIAS], SimpleNamespace(meta={"val": padded}), *fx_node.args[_BIAS + 1:]))
        return constraint(fx_node, *args, **kwargs)

    return constrain


def _needs_padded_copy(mask, fx_mask) -> bool:
    """A mask whose key length is a dynamic axis's, no dim of it broadcast (a stride 0 over more
    than one element: copied, it would grow)."""
    from torch._inductor import ir

    if not isinstance(mask, ir.TensorBox) or not isinstance(fx_mask, torch.fx.Node):
        return False
    val = fx_mask.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() not in (3, 4) or isinstance(val.shape[-1], int):
        return False
    return not any(st == 0 and n != 1 for n, st in zip(val.shape, val.stride()))


def _padded_like(val: torch.Tensor) -> torch.Tensor:
    """A fake tensor of ``val``'s sizes in rows of ``ceil(keys / 8) * 8`` elements, the other dims dense."""
    from torch._inductor.virtualized import V

    strides, step = [1], (val.shape[-1] + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
    for n in reversed(val.shape[:-1]):
        strides.insert(0, step)
        step = step * n
    with V.fake_mode:
        return val.new_empty_strided(val.shape, strides)


def _copy_into(mask, strides):
    """``mask`` copied into a buffer of ``strides`` (SymInts)."""
    from torch._inductor import ir

    exact = [s.node.expr if isinstance(s, torch.SymInt) else s for s in strides]
    copy = ir.ExternKernel.copy_input(mask)
    ir.as_storage_and_layout(copy, freeze=True, want_contiguous=False, exact_strides=exact)
    return copy


def padded_attention_masks():
    """While Inductor lowers: a mask of the memory-efficient attention whose key length is a
    dynamic axis's and that broadcasts over no dim, copied into padded rows first (no guard on the
    length). Inductor is imported here, while a build runs, not with this module."""
    from torch._inductor import lowering

    table = getattr(lowering, "_maybe_layout_constraints", None)
    if not isinstance(table, dict) or _EFFICIENT not in table:
        return contextlib.nullcontext()  # another torch: its own constraints
    return mock.patch.dict(table, {_EFFICIENT: _padded_mask_first(table[_EFFICIENT])})
