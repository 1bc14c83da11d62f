"""Key masks found where a model builds them: one row of keys per batch, the same for every query.

transformers builds an encoder's padding mask as a [batch, 1, queries, keys] tensor from the 2-D
``attention_mask`` (``masking_utils.sdpa_mask``: ``q_idx >= 0`` and the padding row, broadcast),
so the attention reads queries x keys of mask where one row of keys per batch says it all. Our
prefill kernel (``kernels/attention/prefill.py``) reads a key mask a key at a time and skips the
padded key blocks. ``key_masks`` proves, from the ops that build a mask, that it is the same for
every head and query row, and then gives the call its first row alone, [batch, 1, 1, keys], which
the call broadcasts.

The proof is an abstract evaluation of the mask's ops: for each value, the dims it may vary
along and, for integers, bounds (``arange(n) + 0 >= 0`` is always true). Every op it does not
know may vary along every dim of size other than 1, so what it proves holds for any input.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from ..kernels.attention import prefill
from .attention_masks import ancestors, call_node, fused_calls, set_mask

aten = torch.ops.aten


@dataclass(frozen=True)
class Fact:
    """What is known of a value: the dims it may vary along, and bounds of its elements."""

    varies: frozenset
    low: float | None = None
    high: float | None = None

    @property
    def constant(self):
        return self.low if self.low is not None and self.low == self.high else None


def _shape(node) -> tuple:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else ()


def _anything(node) -> Fact:
    """A value that may vary along each dim not of size 1."""
    return Fact(frozenset(i for i, n in enumerate(_shape(node)) if not (isinstance(n, int) and n == 1)))


def _value(arg, facts: dict, rank: int) -> Fact:
    """``arg``'s fact with its dims aligned to the right of a result of ``rank`` dims (broadcast)."""
    if isinstance(arg, (bool, int, float)):
        return Fact(frozenset(), arg, arg)
    fact = facts[arg]
    shift = rank - len(_shape(arg))
    return Fact(frozenset(d + shift for d in fact.varies), fact.low, fact.high)


def _bounds(op, a: Fact, b: Fact) -> tuple:
    """Bounds of ``a op b`` (add or sub), each where the bounds it needs are known."""

    def both(x, y):
        return None if x is None or y is None else op(x, y)

    if op is operator.add:
        return both(a.low, b.low), both(a.high, b.high)
    return both(a.low, b.high), both(a.high, b.low)


_ARITHMETIC = {aten.add.Tensor: operator.add, aten.add.Scalar: operator.add, aten.sub.Tensor: operator.sub,
               aten.sub.Scalar: operator.sub}
_COMPARE = {aten.ge.Scalar: operator.ge, aten.ge.Tensor: operator.ge, aten.gt.Scalar: operator.gt,
            aten.gt.Tensor: operator.gt, aten.le.Scalar: operator.le, aten.le.Tensor: operator.le,
            aten.lt.Scalar: operator.lt, aten.lt.Tensor: operator.lt}
_AND = (aten.__and__.Tensor, aten.bitwise_and.Tensor, aten.logical_and.default, aten.mul.Tensor)
_OR = (aten.__or__.Tensor, aten.bitwise_or.Tensor, aten.logical_or.default)
_SAME = (aten._to_copy.default, aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default,
         aten.contiguous.default)
_FILLED = (aten.new_ones.default, aten.ones.default, aten.new_zeros.default, aten.zeros.default,
           aten.full.default, aten.new_full.default, aten.full_like.default, aten.scalar_tensor.default)


def _fill_value(node) -> float | None:
    if node.target in (aten.new_ones.default, aten.ones.default):
        return 1
    if node.target in (aten.new_zeros.default, aten.zeros.default):
        return 0
    value = node.args[1] if node.target in (aten.full.default, aten.new_full.default, aten.full_like.default) \
        else node.args[0]
    return value if isinstance(value, (bool, int, float)) else None


def _decided(op, a: Fact, b: Fact) -> bool | None:
    """The comparison's result where the bounds decide it for every element, else None."""

    def known(*values) -> bool:
        return all(v is not None for v in values)

    if op in (operator.ge, operator.gt):
        if known(a.low, b.high) and op(a.low, b.high):
            return True
        if known(a.high, b.low) and not op(a.high, b.low):
            return False
    else:  # le, lt
        if known(a.high, b.low) and op(a.high, b.low):
            return True
        if known(a.low, b.high) and not op(a.low, b.high):
            return False
    return None


def fact_of(node, facts: dict) -> Fact:
    """The fact of ``node`` from its inputs' (``facts``)."""
    if node.op != "call_function":
        return _anything(node)
    target, args, rank = node.target, node.args, len(_shape(node))
    if target in _FILLED:
        value = _fill_value(node)
        return Fact(frozenset(), value, value)
    if target in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        start = args[0] if len(args) > 1 else 0
        end = args[1] if len(args) > 1 else args[0]
        step = args[2] if len(args) > 2 else 1
        known = all(isinstance(v, int) for v in (start, end, step)) and step > 0
        if isinstance(start, int) and step == 1 or known:
            return Fact(_anything(node).varies, start, end - 1 if known else None)
        return _anything(node)
    operands = [a for a in args if isinstance(a, (torch.fx.Node, bool, int, float))]
    if any(isinstance(a, torch.fx.Node) and a not in facts for a in operands):
        return _anything(node)
    if target in _SAME:  # a dtype cast keeps where a value varies, not its bounds (5 becomes True)
        return facts[args[0]] if target is not aten._to_copy.default else Fact(facts[args[0]].varies)
    if target in _ARITHMETIC or target in _COMPARE or target in _AND or target in _OR:
        a, b = (_value(x, facts, rank) for x in args[:2])
        varies = a.varies | b.varies
        if target in _ARITHMETIC:
            if len(args) > 2 or node.kwargs.get("alpha", 1) != 1:
                return Fact(varies)
            return Fact(varies, *_bounds(_ARITHMETIC[target], a, b))
        if target in _COMPARE:
            decided = _decided(_COMPARE[target], a, b)
            return Fact(frozenset(), decided, decided) if decided is not None else Fact(varies, 0, 1)
        # x and False is False, x or True is True, x and True (x or False) is x: for booleans
        # (a bitwise or of 1 and 2 is 3), and a product of 0 stays NaN where x is inf
        absorbing, neutral = (0, 1) if target in _AND else (1, 0)
        logical = target in (aten.logical_and.default, aten.logical_or.default)
        for x, y in ((a, b), (b, a)):
            boolean = y.low is not None and y.high is not None and 0 <= y.low and y.high <= 1
            if x.constant == absorbing and (logical or boolean) and target is not aten.mul.Tensor:
                return Fact(frozenset(), absorbing, absorbing)
            if x.constant == neutral and boolean:
                return y
        return Fact(varies)
    if target is aten.unsqueeze.default:
        dim = args[1] % rank
        return Fact(frozenset(d + (d >= dim) for d in facts[args[0]].varies), facts[args[0]].low,
                    facts[args[0]].high)
    if target is aten.expand.default:
        return _value(args[0], facts, rank)
    if target is aten.slice.Tensor:
        return facts[args[0]]
    if target is aten.index.Tensor and len(args[1]) == len(_shape(args[0])) and all(
            isinstance(i, torch.fx.Node) and i in facts for i in args[1]):
        source = facts[args[0]]
        indices = [_value(i, facts, rank) for i in args[1]]
        varies = frozenset().union(*(i.varies for i in indices)) if source.varies else frozenset()
        return Fact(varies, source.low, source.high)
    return _anything(node)


def mask_fact(mask) -> Fact:
    """The fact of ``mask`` from the ops that compute it (those of a model's inputs unknown)."""
    facts: dict = {}
    for node in ancestors(mask):
        facts[node] = fact_of(node, facts)
    return facts[mask]


def key_masks(ep) -> int:
    """Give each attention call of ``ep`` that our prefill kernel takes, and whose mask is proven
    one row of keys per batch, that row ([batch, 1, 1, keys]); returns how many calls."""
    graph, made, rewritten = ep.graph, {}, 0
    for node, bound in fused_calls(graph):
        mask, query, key = bound.get("attn_bias"), bound["query"].meta["val"], bound["key"].meta["val"]
        if not isinstance(mask, torch.fx.Node) or len(_shape(mask)) != 4 or query.dim() != 4:
            continue
        mask_dtype = str(mask.meta["val"].dtype).removeprefix("torch.")
        group = 1 if key.shape[1] == query.shape[1] else 0  # grouped heads: not the prefill kernel's
        if not prefill.takes(str(query.dtype).removeprefix("torch."), query.shape[3], group,
                             bool(bound.get("is_causal")), mask_dtype, key_mask=True):
            continue
        if mask not in made:
            if mask_fact(mask).varies & {1, 2}:
                made[mask] = None
            else:
                with graph.inserting_before(node):
                    row = call_node(graph, aten.slice.Tensor, (mask, 2, 0, 1), {})
                    if _shape(mask)[1] != 1:
                        row = call_node(graph, aten.slice.Tensor, (row, 1, 0, 1), {})
                    # the row alone is computed, and broadcast by the call (an expanded view
                    # would be copied whole for torch's kernels: Inductor's cache_sdpa_constraint)
                    made[mask] = call_node(graph, aten.clone.default, (row,), {})
        if made[mask] is not None:
            set_mask(node, made[mask])
            rewritten += 1
    if rewritten:
        graph.lint()
        ep.graph_module.recompile()
    return rewritten
