"""Boolean attention masks made additive once per forward, where the model makes them.

torch's fused attention kernels take an additive mask. Given a boolean one,
``F.scaled_dot_product_attention`` makes it additive at every call: a fill and a masked fill
of the whole [batch, 1, queries, keys] mask, for every layer, though the model made the mask
once and every layer reads it (BERT-base at 32 x 512 on an H100: 0.3 ms of 8.3 ms, 36 of its
195 launches at any size). ``make_masks_additive`` gives those calls the mask already additive
(0 where the boolean one is true, -inf elsewhere: what torch makes of it), computed once from
the boolean mask before its views, and one node for every call that views it alike: Inductor
makes one aligned copy of it for them all (``cache_sdpa_constraint``; the memory-efficient
kernel's mask may broadcast over heads, not over query rows), where it made one per call.
Calls the package's own attention kernels take (``kernels/attention/lowering.py``) keep the
boolean mask: they read it in one byte a key.
"""

from __future__ import annotations

import torch

from ..kernels.attention import prefill
from ..kernels.attention.lowering import takes

aten = torch.ops.aten
_FUSED = (aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_cudnn_attention.default)
_VIEWS = (aten.expand.default, aten.view.default, aten._unsafe_view.default, aten.unsqueeze.default,
          aten.slice.Tensor, aten.select.int, aten.permute.default, aten.alias.default)


def make_masks_additive(ep) -> int:
    """Give each fused attention call of ``ep`` that stays torch's and has a boolean mask the
    additive one, made once per mask; returns how many calls."""
    graph, made, rewritten = ep.graph, {}, 0
    for node, bound in fused_calls(graph):
        mask, query, key = bound.get("attn_bias"), bound["query"].meta["val"], bound["key"].meta["val"]
        if not isinstance(mask, torch.fx.Node) or mask.meta["val"].dtype != torch.bool or ours(bound, query, key):
            continue
        views = []
        base = mask
        while base.target in _VIEWS:
            views.append(base)
            base = base.args[0]
        alike = (base, query.dtype, tuple((v.target, str(v.args[1:]), str(v.kwargs)) for v in views))
        if alike not in made:  # one node for every call that views the mask alike
            with graph.inserting_before(node):
                additive = _additive(graph, base, query.dtype)
                for view in reversed(views):  # the same views of the additive mask
                    additive = call_node(graph, view.target, (additive, *view.args[1:]), dict(view.kwargs))
            made[alike] = additive
        set_mask(node, made[alike])
        rewritten += 1
        for view in views:  # the boolean mask's views no call reads any more
            if not view.users:
                graph.erase_node(view)
    if rewritten:
        graph.lint()
        ep.graph_module.recompile()
    return rewritten


def fused_calls(graph, targets: tuple = _FUSED):
    """(node, its arguments by name) of each of ``graph``'s fused attention calls (of ``targets``)."""
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in targets:
            names = [a.name for a in node.target._schema.arguments]
            yield node, {**dict(zip(names, node.args)), **node.kwargs}


def set_mask(node, mask) -> None:
    """Give the fused attention call ``node`` the mask ``mask``."""
    set_argument(node, "attn_bias", mask)


def set_argument(node, name: str, value) -> None:
    """Give the call ``node`` ``value`` for its argument ``name``, where the call passes it (by
    keyword where it passes it so, or leaves it out)."""
    index = [a.name for a in node.target._schema.arguments].index(name)
    if name in node.kwargs or index >= len(node.args):
        node.kwargs = {**node.kwargs, name: value}
    else:
        node.args = (*node.args[:index], value, *node.args[index + 1:])


def ours(bound: dict, query, key) -> bool:
    """Whether the package's own attention kernels take this call: a prefill under a key mask
    (``mask_rows.py`` made it one), or one of static sizes."""
    mask = bound.get("attn_bias")
    mask = mask.meta["val"] if isinstance(mask, torch.fx.Node) else None
    if mask is not None and mask.dim() == 4 and all(
            _literal(mask.shape[d], 1) or _literal(mask.stride(d), 0) for d in (1, 2)) and prefill.takes(
            str(query.dtype).removeprefix("torch."), query.shape[3], 1 if key.shape[1] == query.shape[1] else 0,
            bool(bound.get("is_causal")), str(mask.dtype).removeprefix("torch."), key_mask=True):
        return True
    if not all(isinstance(n, int) for n in (*query.shape, *key.shape)):
        return False
    group = query.shape[1] // key.shape[1] if key.shape[1] else 1
    return takes(query.dtype, tuple(query.shape), key.shape[2], group, bool(bound.get("is_causal")), torch.bool)


def _literal(size, value: int) -> bool:
    """Whether ``size`` is ``value`` at any size of the dynamic axes (a symbolic size is not compared)."""
    return isinstance(size, int) and size == value


def _additive(graph, mask, dtype: torch.dtype):
    """``mask`` (boolean) as 0 where true and -inf where false, in ``dtype``."""
    zeros = call_node(graph, aten.full_like.default, (mask, 0.0), {"dtype": dtype})
    hidden = call_node(graph, aten.logical_not.default, (mask,), {})
    return call_node(graph, aten.masked_fill.Scalar, (zeros, hidden, float("-inf")), {})


def call_node(graph, target, args: tuple, kwargs: dict):
    """A new node of ``target``, its fake value computed from its inputs' (later passes read it)."""
    node = graph.call_function(target, args, kwargs)
    fake = torch.fx.node.map_arg(args, lambda a: a.meta["val"])  # sizes of a dynamic axis too
    node.meta["val"] = target(*fake, **kwargs)
    return node


def ancestors(node) -> list:
    """``node`` and every node it is computed from, in the graph's order."""
    found, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in found:
            found.add(n)
            stack.extend(n.all_input_nodes)
    return [n for n in node.graph.nodes if n in found]
