"""Weight-only quantized weights: what a layout means (``Quant``), the ``aotcombo::dequantize``
op the rewrite puts where the model dequantizes a weight (``quant_match.recognise``), and its
expansion back into ATen ops (``expand``) where no kernel of ours takes it.

A quantized weight is its integer bytes ``q`` and a scale per group of ``group`` weights along
K (``group == K``: one per output channel), with an optional zero point:

    w[n, k] = (q[n, k] - zero_value - z[n, g]) * s[n, g]   ("point": z a tensor; "none": no z)
    w[n, k] = (q[n, k] - zero_value) * s[n, g] + z[n, g]    ("offset")

with g = k // group; ``bits`` 8: ``q`` is [N, K] (int8 or uint8); 4: two per byte along K,
[N, K // 2], weight k in the low nibble of byte k // 2 for even k (``high_first``: the high).
The values are computed in float32 and rounded once to ``dtype``, the weight's dtype.

A decode step's linear over such a weight (``match``: up to ``QUANT_MAX_ROWS`` rows) is a
fused linear whose kernel reads ``q`` and the scales and dequantizes in registers
(``lowering``); every other one is expanded here into ATen ops Inductor writes its code for
(the weight dequantized per call, as the model wrote it).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import torch

from ..common import recompiled

OP = "aotcombo::dequantize"
aten = torch.ops.aten


@dataclass(frozen=True)
class Quant:
    bits: int  # 8: q is [N, K]; 4: [N, K // 2], two weights per byte along K
    group: int  # weights per scale along K (K: a scale per output channel)
    high_first: bool  # 4 bits: the even k in the high nibble
    zero: str  # "none" | "point" (subtracted before the scale) | "offset" (added after it)
    zero_value: float  # a constant subtracted from q before the scale (8 for a signed int4 in a nibble)
    dtype: str  # of the dequantized weight

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Quant":
        return cls(**json.loads(text))

    def per_channel(self, k: int) -> bool:
        """Whether the scale can multiply the product instead of the weights: one per output
        channel and no zero tensor."""
        return self.group == k and self.zero == "none"

    def describe(self, k: int) -> str:
        scale = "per output channel" if self.group == k else f"per group of {self.group}"
        zero = {"none": "", "point": " and zero point", "offset": " and offset"}[self.zero]
        return f"int{self.bits}, scale{zero} {scale}"


def unpack(q: torch.Tensor, spec: Quant) -> torch.Tensor:
    """The integer values of ``q`` as an [N, K] int32 tensor."""
    if spec.bits == 8:
        return q.to(torch.int32)
    b = q.to(torch.int32)
    low, high = b & 15, (b >> 4) & 15
    return torch.stack((high, low) if spec.high_first else (low, high), dim=-1).reshape(q.shape[0], -1)


def dequantize_eager(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, spec: Quant) -> torch.Tensor:
    """The weight [N, K] in ``spec.dtype`` (any device)."""
    values = unpack(q, spec)
    n, k = values.shape
    shape = (n, k // spec.group, 1)
    w = (values.float() - spec.zero_value).view(n, k // spec.group, spec.group)
    if spec.zero == "point":
        w = w - zero.float().reshape(shape)
    w = w * scale.float().reshape(shape)
    if spec.zero == "offset":
        w = w + zero.float().reshape(shape)
    return w.reshape(n, k).to(getattr(torch, spec.dtype))


@torch.library.custom_op(OP, mutates_args=())
def dequantize(q: torch.Tensor, operands: list[torch.Tensor], spec: str) -> torch.Tensor:
    """``operands``: the scale, then the zero tensor where ``spec.zero`` names one."""
    s = Quant.from_json(spec)
    return dequantize_eager(q, operands[0], operands[1] if len(operands) > 1 else None, s)


@dequantize.register_fake
def _(q, operands, spec):
    s = Quant.from_json(spec)
    return q.new_empty((q.shape[0], q.shape[1] * (8 // s.bits)), dtype=getattr(torch, s.dtype))


def is_dequantize(node) -> bool:
    return isinstance(node, torch.fx.Node) and node.target is torch.ops.aotcombo.dequantize.default


def parts(node) -> tuple:
    """``(q, operands, spec)`` of a dequantize node."""
    q, operands, text = node.args
    return q, list(operands), Quant.from_json(text)


# --- back into ATen ops, where no kernel of ours reads the weight --------------------------

def expand(ep) -> int:
    """Replace, in place in ``ep``, each dequantize call left by the fused linears with the
    ATen ops that compute it (Inductor's code then dequantizes per call); returns how many."""
    graph = ep.graph
    done = 0
    for node in list(graph.nodes):
        if not is_dequantize(node):
            continue
        q, operands, spec = parts(node)
        with graph.inserting_before(node):
            result = _expanded(graph, q, operands, spec)
        result.meta.update({key: value for key, value in node.meta.items() if key != "val"})
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        done += 1
    return recompiled(ep, done)


def _expanded(graph, q, operands, spec: Quant):
    def op(target, *args, **kwargs):
        made = graph.call_function(target, args, kwargs)
        made.meta["val"] = target(*torch.fx.node.map_arg(args, lambda a: a.meta["val"]), **kwargs)
        return made

    values = op(aten._to_copy.default, q, dtype=torch.int32)
    n = q.meta["val"].shape[0]
    if spec.bits == 4:
        low = op(aten.bitwise_and.Scalar, values, 15)
        high = op(aten.bitwise_and.Scalar, op(aten.bitwise_right_shift.Tensor_Scalar, values, 4), 15)
        values = op(aten.view.default, op(aten.stack.default, [high, low] if spec.high_first else [low, high], -1),
                    [n, -1])
    k = values.meta["val"].shape[1]
    groups = k // spec.group
    w = op(aten.view.default, op(aten._to_copy.default, values, dtype=torch.float32), [n, groups, spec.group])
    if spec.zero_value:
        w = op(aten.sub.Tensor, w, spec.zero_value)

    def per_group(t):
        return op(aten.view.default, op(aten._to_copy.default, t, dtype=torch.float32), [n, groups, 1])

    if spec.zero == "point":
        w = op(aten.sub.Tensor, w, per_group(operands[1]))
    w = op(aten.mul.Tensor, w, per_group(operands[0]))
    if spec.zero == "offset":
        w = op(aten.add.Tensor, w, per_group(operands[1]))
    return op(aten._to_copy.default, op(aten.view.default, w, [n, k]), dtype=getattr(torch, spec.dtype))
