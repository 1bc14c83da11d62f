"""Attention reads its query, key and value through their strides: no copy to make them contiguous.

Models often write ``x.view(b, s, heads, d).transpose(1, 2).contiguous()`` before attention
(Whisper's q, k and v). Eager needs no copy there, and neither do torch's fused kernels: they take
any strides whose last one is 1. ``drop_copies_before_attention`` hands the attention call the
tensor before its ``contiguous()`` copy where that copy has no other reader: Inductor then writes
no copy kernel for it, and the attention's output comes back in the layout the model's
``transpose(1, 2)`` after it reads without a copy either (Whisper-small's encoder: 4 copy
kernels per layer, 48 in all, before).

``scale_in_attention``: a query scaled by a power of two before attention (Whisper's and BART's
``q_proj(x) * head_dim ** -0.5``, then attention at scale 1) is handed over unscaled, the factor
in the call's ``scale``: the fused kernels scale the products in float32, and a power of two
scales exactly either way. The scale's kernel (12 a call in Whisper-small's encoder, 3.7 us each
on an H100) goes.
"""

from __future__ import annotations

import math

import torch

from ..kernels.common import recompiled
from .attention_masks import fused_calls, ours, set_argument

aten = torch.ops.aten
_ATTENTION = (aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
              aten._scaled_dot_product_cudnn_attention.default, aten.scaled_dot_product_attention.default)
_INPUTS = ("query", "key", "value")
_SHAPES = (aten.view.default, aten.transpose.int, aten.permute.default, aten._unsafe_view.default)


def _is_contiguous_copy(node) -> bool:
    return (isinstance(node, torch.fx.Node) and node.target is aten.clone.default and len(node.users) == 1
            and node.kwargs.get("memory_format") == torch.contiguous_format)


def drop_copies_before_attention(ep) -> int:
    """Give each attention call of ``ep`` its query, key and value before a ``contiguous()`` copy
    only it reads (their last stride 1); returns how many copies went."""
    graph, dropped = ep.graph, 0
    for node, bound in fused_calls(graph, _ATTENTION):
        if ours(bound, bound["query"].meta["val"], bound["key"].meta["val"]):  # the package's kernels: as traced
            continue
        for name in _INPUTS:
            value = bound.get(name)
            if not _is_contiguous_copy(value) or value.args[0].meta["val"].stride()[-1] != 1:
                continue
            set_argument(node, name, value.args[0])
            graph.erase_node(value)
            dropped += 1
    return recompiled(ep, dropped)


def _power_of_two(value) -> bool:
    return isinstance(value, float | int) and value > 0 and math.frexp(value)[0] == 0.5


def scale_in_attention(ep) -> int:
    """Move a power-of-two factor on each attention call's query (through views and transposes
    only it reads) into the call's ``scale``; returns how many moved."""
    graph, moved = ep.graph, 0
    for node, bound in fused_calls(graph, _ATTENTION):
        query = bound["query"]
        if ours(bound, query.meta["val"], bound["key"].meta["val"]):  # the package's kernels: as traced
            continue
        chain = [query]  # the query's views and transposes, back to the product
        while chain[-1].target in _SHAPES and len(chain[-1].users) == 1:
            chain.append(chain[-1].args[0])
        product = chain[-1]
        if (product.target is not aten.mul.Tensor or len(product.users) != 1 or not _power_of_two(product.args[1])
                or not isinstance(product.args[0], torch.fx.Node)):
            continue
        unscaled, factor = product.args
        if unscaled.meta["val"].dtype != product.meta["val"].dtype:
            continue
        vals = {product: unscaled.meta["val"]}  # the views' values on the unscaled tensor (its strides)
        try:
            with unscaled.meta["val"].fake_mode:
                for shape_op in reversed(chain[:-1]):
                    args = (vals[a] if isinstance(a, torch.fx.Node) else a for a in shape_op.args)
                    vals[shape_op] = shape_op.target(*args, **shape_op.kwargs)
        except RuntimeError:  # a view its strides do not allow
            continue
        product.replace_all_uses_with(unscaled)
        for shape_op in chain[:-1]:
            shape_op.meta["val"] = vals[shape_op]
        scale = bound.get("scale")
        set_argument(node, "scale", (1.0 / math.sqrt(query.meta["val"].shape[-1]) if scale is None else scale) * factor)
        graph.erase_node(product)
        moved += 1
    return recompiled(ep, moved)
