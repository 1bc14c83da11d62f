"""A per-row float8 linear of few output tiles: its product unit-scaled into float32, its scales applied after.

A per-row ``_scaled_mm`` (x's scale [M, 1], the weight's [1, N]; torchao's ``PerRow``) runs cuBLASLt's
outer-vector-scaled kernel, which tiles the output 128 x 128 whatever its shape. A linear of fewer such
tiles than the GPU has multiprocessors leaves some of them idle: Llama 3.2 1B's prefill of 512 tokens
has 64 tiles in o and in down, 96 in q/k/v, for 132 multiprocessors. The same product with unit scales
(``TensorWise``, one scale each) into float32 gets cuBLAS's other tiles (128 x 64 there), and the two
scales (and the bias) then apply in the op that reads the product, which Inductor writes a kernel for
(the residual add and the norm after o and down, the rotary embedding after q and k). The result is
the same: the per-row kernel too scales the float32 sums and rounds once; here the float32 product is
read back, 4 bytes an element against 2. Where an op of another library reads the product itself
(attention on an unrotated v, the model's output), the scaling is a kernel of its own.

H200, torch 2.11, one ``_scaled_mm`` at Llama 3.2 1B's shapes (benchmarks/scaled_mm_probe.py, CUDA-graph
replays, us, per row against unit-scaled into float32, the tiles in brackets): 512 tokens q/k/v [96]
8.84 -> 8.13, o [64] 8.72 -> 6.73, down [64] 25.2-27.1 -> 17.1, gate/up [512] 29.8 against 34.0, the
LM head 226 against 267; 128 tokens q/k/v [24] 8.77 -> 6.22, o [16] 9.55 -> 5.92, down [16] 22.5 ->
10.1, gate/up [128] 10.2 against 11.8; 1024 tokens o [128] 9.56 against 10.2, down [128] 27.7 against
26.9. So a call of at most three quarters as many tiles as multiprocessors (MAX_SHARE) is unit-scaled,
others stay per row. Only sm_90 is measured: other arches keep the per-row call.
"""

from __future__ import annotations

import torch

from ..common import cdiv
from .combine_float8 import arguments_of

aten = torch.ops.aten
TILE = 128  # cuBLASLt's per-row float8 kernel's output tile (rows and columns), sm_90
MULTIPROCESSORS = {90: 132}  # H100 SXM and H200; the arches measured
MAX_SHARE = 0.75  # of the multiprocessors: the most tiles a unit-scaled call has
OUT_DTYPES = (torch.bfloat16, torch.float16)


def _emit(graph: torch.fx.Graph, op, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
    """A node calling ``op``, its value computed on the fake values of its arguments."""
    node = graph.call_function(op, args, kwargs or {})
    node.meta["val"] = op(*(a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args), **(kwargs or {}))
    return node


def _per_row_of_few_tiles(node, multiprocessors: int) -> dict | None:
    """The arguments of ``node``, a per-row float8 ``_scaled_mm`` of static sizes whose output has
    at most ``MAX_SHARE`` of ``multiprocessors`` 128 x 128 tiles, else None."""
    if node.op != "call_function" or node.target is not aten._scaled_mm.default:
        return None
    a = arguments_of(node)
    x, w, sa, sb = (a[k].meta.get("val") if isinstance(a[k], torch.fx.Node) else None
                    for k in ("self", "mat2", "scale_a", "scale_b"))
    if any(t is None for t in (x, w, sa, sb)) or a["scale_result"] is not None or a["out_dtype"] not in OUT_DTYPES:
        return None
    bias = a["bias"]
    if bias is not None and (not isinstance(bias, torch.fx.Node) or bias.meta["val"].dim() != 1):
        return None
    m, n = x.shape[0], w.shape[1]
    if not (isinstance(m, int) and isinstance(n, int)) or x.dim() != 2:
        return None  # a size of the dynamic axes: the tiles are not known
    if tuple(sa.shape) != (m, 1) or tuple(sb.shape) != (1, n) or sa.dtype != torch.float32 or sb.dtype != torch.float32:
        return None
    return a if cdiv(m, TILE) * cdiv(n, TILE) <= MAX_SHARE * multiprocessors else None


def unit_scaled(graph: torch.fx.Graph, arch: int) -> int:
    """Rewrite, in place, each per-row float8 ``_scaled_mm`` of few tiles on ``arch`` as the
    unit-scaled product in float32 times x's and the weight's scales (plus the bias), rounded to
    the call's dtype; returns how many. The unit scale is one float32 constant of the graph."""
    multiprocessors = MULTIPROCESSORS.get(arch)
    if multiprocessors is None:
        return 0
    found = [(node, a) for node in graph.nodes if (a := _per_row_of_few_tiles(node, multiprocessors))]
    if not found:
        return 0
    first = found[0][0]
    like = found[0][1]["scale_a"].meta["val"]
    with graph.inserting_before(first):
        unit = graph.call_function(aten.full.default, ([], 1.0), {"dtype": torch.float32, "device": like.device})
    unit.meta["val"] = aten.new_ones.default(like, [])  # a fake tensor of the graph's mode and device
    for node, a in found:
        with graph.inserting_before(node):
            value = _emit(graph, aten._scaled_mm.default, (a["self"], a["mat2"], unit, unit, None, None,
                                                           torch.float32, a["use_fast_accum"]))
            value = _emit(graph, aten.mul.Tensor, (value, a["scale_a"]))
            value = _emit(graph, aten.mul.Tensor, (value, a["scale_b"]))
            if a["bias"] is not None:
                value = _emit(graph, aten.add.Tensor, (value, a["bias"]))
            value = _emit(graph, aten._to_copy.default, (value,), {"dtype": a["out_dtype"]})
        value.meta.update({k: v for k, v in node.meta.items() if k != "val"})
        node.replace_all_uses_with(value)
        graph.erase_node(node)
    graph.lint()
    return len(found)
