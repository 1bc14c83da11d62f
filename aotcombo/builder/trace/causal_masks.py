"""Causal masks the model computes from constants alone become ``is_causal``.

A decoder's prefill without padding gets from transformers a [batch, 1, queries, keys] mask built
from ``arange``s (``masking_utils``: key position <= query position, and the same packed
sequence), which torch's fused attention reads in full, for every layer and every key block,
where ``is_causal=True`` reads none and skips the key blocks past the diagonal. ``causal_masks``
evaluates each such mask at build time, on the CPU, from the ops that make it (only where none
of them reads an input, a weight or a size of a dynamic axis); a mask equal to the causal one
of the call's query and key lengths (key j visible to query i iff j <= i, torch's
``is_causal``), as booleans or as 0 and -inf (or the dtype's lowest), broadcast over batch
and heads, is dropped and the call made causal. Calls the package's own attention kernels take
(``attention_masks.ours``) are left as they are.
"""

from __future__ import annotations

import torch

from .attention_masks import ancestors, fused_calls, ours, set_argument

aten = torch.ops.aten
MAX_ELEMENTS = 1 << 26  # a mask larger than this is not evaluated at build time


def causal_masks(ep) -> int:
    """Make each fused attention call of ``ep`` whose mask is the causal one causal, without
    the mask; returns how many calls."""
    graph, known, rewritten = ep.graph, {}, 0
    for node, bound in fused_calls(graph):
        mask, query, key = bound.get("attn_bias"), bound["query"].meta["val"], bound["key"].meta["val"]
        if not isinstance(mask, torch.fx.Node) or bound.get("is_causal") or not all(
                isinstance(n, int) for n in (*query.shape, *key.shape)) or ours(bound, query, key):
            continue  # (a size of a dynamic axis: no mask is evaluated)
        seen = (mask, tuple(query.shape), tuple(key.shape))  # a mask read by calls of other lengths: each
        if seen not in known:
            known[seen] = _is_causal(mask, query, key)
        if known[seen]:
            _make_causal(node)
            rewritten += 1
    if rewritten:
        graph.eliminate_dead_code()
        graph.lint()
        ep.graph_module.recompile()
    return rewritten


def _is_causal(mask: torch.fx.Node, query, key) -> bool:
    """Whether ``mask``, evaluated, is the causal mask of ``query`` [b, h, m, d] and ``key``."""
    if query.dim() != 4:
        return False
    value = evaluate(mask)
    if value is None or value.dim() != 4:
        return False
    m, n = query.shape[2], key.shape[2]
    try:
        value = value.expand(query.shape[0], query.shape[1], m, n)
    except RuntimeError:  # it does not broadcast to the scores: not a mask of this call
        return False
    causal = torch.ones(m, n, dtype=torch.bool).tril()
    if value.dtype == torch.bool:
        return bool((value == causal).all())
    if not value.is_floating_point():
        return False
    hidden = value <= torch.finfo(value.dtype).min
    return bool(((value == 0) == causal).all() and (hidden == ~causal).all())


def evaluate(node: torch.fx.Node) -> torch.Tensor | None:
    """``node``'s value, computed on the CPU from the ops that make it; None where one of them
    reads a placeholder (an input, a weight), has a symbolic size, or makes too large a tensor."""
    order = ancestors(node)
    for n in order:
        val = n.meta.get("val")
        if n.op != "call_function" or not isinstance(val, torch.Tensor) or not all(
                isinstance(s, int) for s in val.shape) or val.numel() > MAX_ELEMENTS:
            return None
    values: dict = {}
    for n in order:
        args = torch.fx.node.map_arg(n.args, values.get)
        kwargs = {k: (torch.device("cpu") if k == "device" else v)
                  for k, v in torch.fx.node.map_arg(n.kwargs, values.get).items()}
        try:
            values[n] = n.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - an op that will not run here: not evaluated
            return None
        if not isinstance(values[n], torch.Tensor):
            return None
    return values[node]


def _make_causal(node: torch.fx.Node) -> None:
    """The fused attention call ``node`` with no mask and ``is_causal=True``."""
    set_argument(node, "attn_bias", None)
    set_argument(node, "is_causal", True)
