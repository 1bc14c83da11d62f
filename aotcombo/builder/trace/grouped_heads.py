"""Grouped-query attention without a copy of the key/value cache per query head.

A model whose query heads share key/value heads (Llama 3: 32 query heads over 8 key/value
heads) either repeats each key/value head for its group before the attention (transformers'
``repeat_kv``: ``x[:, :, None].expand(b, kv, group, s, d).reshape(b, kv * group, s, d)``) or
asks ``scaled_dot_product_attention(..., enable_gqa=True)`` for it, which ``export.py`` traces
as the same repeat. At a decode step that repeat is a copy of the whole cache, ``group`` times
over, every layer: 16 MB per layer of Llama 3 8B at 1024 positions, 12.6 us of a 157 us layer
on an H200, more than the attention itself.

``read_grouped_heads`` gives such an attention the un-repeated keys and values instead (the
fused ops' shape functions take them: the output's heads are the query's); ``to_graph`` marks
the call ``enable_gqa``, and the decode kernel (``kernels/attention``) reads key/value head
``h // group`` for query head ``h``, each key/value head once for its whole group. Only calls
that kernel takes are rewritten (``lowering.takes``), and causal ones without a mask that torch's
flash kernel takes with ``enable_gqa`` (a decoder's prefill, ``causal_masks.py`` having dropped
its mask): any other would be torch's ``enable_gqa`` at run time, which may take its slower
math path where the repeat and a fused kernel did better (a prefill under a mask).
"""

from __future__ import annotations

import torch

from ..kernels.attention.lowering import takes
from .attention_masks import fused_calls, set_argument

aten = torch.ops.aten
_FUSED = (aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default)
_RESHAPES = (aten._unsafe_view.default, aten.view.default, aten.reshape.default)
# torch's own attention reads grouped heads itself (``enable_gqa``) where its flash kernel runs
# the call: causal, no mask, 16-bit, a head of at most 256. H200, Llama 3.2 1B prefill of 512
# tokens (float8_bench --model llama_1b, A/B in one call): bf16 2.496 -> 2.469 ms, float8 1.953
# -> 1.915 (16 repeat copies fewer). Elsewhere torch may take its math path.
FLASH_DTYPES, FLASH_HEAD_DIM = (torch.float16, torch.bfloat16), 256


def _shape(node) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not all(isinstance(n, int) for n in val.shape):
        return None
    return tuple(val.shape)


def repeated_source(node) -> tuple | None:
    """``(x, group)`` when ``node`` is ``x`` [b, kv, s, d] with each head repeated ``group``
    times (``repeat_kv``: unsqueeze at 2, expand, clone, reshape), else None."""
    if not isinstance(node, torch.fx.Node) or node.target not in _RESHAPES:
        return None
    expanded = node.args[0]
    if expanded.target is aten.clone.default:
        expanded = expanded.args[0]
    if expanded.target is not aten.expand.default or expanded.args[0].target is not aten.unsqueeze.default:
        return None
    unsqueezed = expanded.args[0]
    source, dim = unsqueezed.args[:2]
    shapes = (_shape(node), _shape(expanded), _shape(source))
    if dim != 2 or None in shapes:
        return None
    (b, heads, s, d), (b5, kv, group, s5, d5), source_shape = shapes
    if source_shape != (b, kv, s, d) or (b5, s5, d5) != (b, s, d) or heads != kv * group or group < 2:
        return None
    return source, group


def read_grouped_heads(ep) -> int:
    """Give each fused attention call of ``ep`` whose keys and values are ``repeat_kv``'s, and
    which the decode kernel or torch's flash kernel takes, the un-repeated ones; returns how many."""
    graph, rewritten = ep.graph, 0
    for node, bound in fused_calls(graph, _FUSED):
        keys, values, query = repeated_source(bound["key"]), repeated_source(bound["value"]), _shape(bound["query"])
        if keys is None or values is None or keys[1] != values[1] or query is None:
            continue
        mask = bound.get("attn_bias")
        mask_dtype = mask.meta["val"].dtype if isinstance(mask, torch.fx.Node) else None
        causal, dtype = bool(bound.get("is_causal")), bound["query"].meta["val"].dtype
        if not takes(dtype, query, _shape(keys[0])[2], keys[1], causal, mask_dtype) and not (
                causal and mask is None and dtype in FLASH_DTYPES and query[3] <= FLASH_HEAD_DIM):
            continue
        set_argument(node, "key", keys[0])
        set_argument(node, "value", values[0])
        _erase_unused(graph, [bound["key"], bound["value"]])
        rewritten += 1
    if rewritten:
        graph.lint()
        ep.graph_module.recompile()
    return rewritten


def _erase_unused(graph, nodes: list) -> None:
    """Erase the repeats no one reads any more, and what they alone read, back to their source."""
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if isinstance(node, torch.fx.Node) and not node.users and node.target in (
                *_RESHAPES, aten.clone.default, aten.expand.default, aten.unsqueeze.default):
            pending += node.all_input_nodes
            graph.erase_node(node)
