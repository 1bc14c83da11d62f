"""A weight stored as [k, n] (transformers' ``Conv1D``: GPT-2's linears; any ``x @ W``) and left to
cuBLAS, stored as [n, k] instead: transposed once at load, read by the product through its transpose.

cuBLAS picks other kernels for the two layouts, and for products of a few hundred to a couple of
thousand rows those of [n, k] (``nn.Linear``'s) are the faster. H100, torch 2.11, 2026-12-06, GPT-2
small's four linears (q/k/v, o, up with its GELU in cuBLASLt's epilogue, down), CUDA graphs of 20
calls, the best of two medians, us a layer, [k, n] / [n, k]: bf16 at 128 rows 20.8 / 20.9, 256 23.5 /
22.5, 512 28.9 / 27.4, 1024 39.2 / 37.5, 2048 59.0 / 57.0, 4096 99.2 / 99.6, 8192 192.3 / 198.0; fp16
21.2 / 21.1, 24.5 / 22.8, 29.3 / 28.0, 39.4 / 38.2, 59.5 / 58.1, 101.6 / 103.0, 196.7 / 209.5. So a
product of ``MIN_ROWS`` to ``MAX_ROWS`` rows, fixed at build time, reads its weight as [n, k]; others
keep the model's layout. In the model (full-size GPT-2 at 4 x 256 tokens, bf16, its 1024-row GEMMs through
``runtime/cublaslt.py``), a CUDA-graph replay after 10 ms of rest, before / after, two runs: 773 / 765 and
781 / 767 us, the q/k/v GEMMs 112.3 -> 106.0 us a call; the calls back to back moved within the host's noise
(H100, 2026-12-06).

``transpose(ep)`` rewrites each such ``addmm`` / ``mm`` / ``matmul`` / ``_addmm_activation`` by a 16-bit weight of
the program (a parameter or constant, 2-D, row-major [k, n]) to read ``clone(W.t()).t()``: Inductor's
copy of the weight reads weights alone, so it runs once, at load (``plan/at_load.py``), and the
product reads the copy. Run after the rewrites that look for a weight as a linear's operand
(``linear_match``, ``activation_epilogue``).
"""

from __future__ import annotations

import math

import torch

from ..common import meta_value, recompiled

aten = torch.ops.aten
MIN_ROWS, MAX_ROWS = 256, 2048
_PRODUCTS = {aten.addmm.default: 2, aten.mm.default: 1, aten._addmm_activation.default: 2,  # op: W's place
             aten.matmul.default: 1}  # x @ W (x's leading dims: the rows)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _row_major_weight(node, weights: set) -> bool:
    val = _val(node)
    return (node in weights and val.dim() == 2 and val.dtype in (torch.float16, torch.bfloat16)
            and tuple(val.stride()) == (val.shape[1], 1))


def _rows_in_range(x) -> bool:
    lead = _val(x).shape[:-1]
    return bool(lead) and all(isinstance(d, int) for d in lead) and MIN_ROWS <= math.prod(lead) <= MAX_ROWS


def transpose(ep) -> int:
    """Rewrite, in place in the ExportedProgram ``ep``, the products above to read their weight as
    [n, k]; returns how many."""
    from torch.export.graph_signature import InputKind

    graph = ep.graph
    names = {s.arg.name for s in ep.graph_signature.input_specs
             if s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR)}
    weights = {n for n in graph.nodes if n.op == "placeholder" and n.name in names}
    copies: dict = {}  # weight -> its [n, k] copy read as [k, n]: one a weight, however many products read it
    count = 0
    for node in list(graph.nodes):
        place = _PRODUCTS.get(node.target)
        if place is None or len(node.args) != place + 1:
            continue
        w = node.args[place]
        if not _row_major_weight(w, weights) or not _rows_in_range(node.args[place - 1]):
            continue
        if w not in copies:
            with graph.inserting_after(w):
                nk = graph.call_function(aten.permute.default, (w, [1, 0]))
            with graph.inserting_after(nk):
                copy = graph.call_function(aten.clone.default, (nk,), {"memory_format": torch.contiguous_format})
            with graph.inserting_after(copy):
                kn = graph.call_function(aten.permute.default, (copy, [1, 0]))
            for made in (nk, copy, kn):
                made.meta["val"] = made.target(*(meta_value(a) for a in made.args), **made.kwargs)
            copies[w] = kn
        node.replace_input_with(w, copies[w])
        count += 1
    return recompiled(ep, count)
