"""Attention reads its query, key and value through their strides: no copy to make them contiguous.

Models often write ``x.view(b, s, heads, d).transpose(1, 2).contiguous()`` before attention
(Whisper's q, k and v). Eager needs no copy there, and neither do torch's fused kernels: they take
any strides whose last one is 1. ``drop_copies_before_attention`` hands the attention call the
tensor before its ``contiguous()`` copy where that copy has no other reader: Inductor then writes
no copy kernel for it, and the attention's output comes back in the layout the model's
``transpose(1, 2)`` after it reads without a copy either (Whisper-small's encoder: 4 copy
kernels per layer, 48 in all, before).
"""

from __future__ import annotations

import torch

from .attention_masks import ours

aten = torch.ops.aten
_ATTENTION = (aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
              aten._scaled_dot_product_cudnn_attention.default, aten.scaled_dot_product_attention.default)
_INPUTS = ("query", "key", "value")


def _is_contiguous_copy(node) -> bool:
    return (isinstance(node, torch.fx.Node) and node.target is aten.clone.default and len(node.users) == 1
            and node.kwargs.get("memory_format") == torch.contiguous_format)


def drop_copies_before_attention(ep) -> int:
    """Give each attention call of ``ep`` its query, key and value before a ``contiguous()`` copy
    only it reads (their last stride 1); returns how many copies went."""
    graph, dropped = ep.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _ATTENTION:
            continue
        names = [a.name for a in node.target._schema.arguments]
        bound = {**dict(zip(names, node.args)), **node.kwargs}
        if ours(bound, bound["query"].meta["val"], bound["key"].meta["val"]):  # the package's kernels: as traced
            continue
        for position, name in enumerate(names):
            value = node.kwargs.get(name, node.args[position] if position < len(node.args) else None)
            if name not in _INPUTS or not _is_contiguous_copy(value):
                continue
            source = value.args[0]
            if source.meta["val"].stride()[-1] != 1:
                continue
            if name in node.kwargs:
                node.kwargs = {**node.kwargs, name: source}
            else:
                node.args = (*node.args[:position], source, *node.args[position + 1:])
            graph.erase_node(value)
            dropped += 1
    if dropped:
        graph.lint()
        ep.graph_module.recompile()
    return dropped
