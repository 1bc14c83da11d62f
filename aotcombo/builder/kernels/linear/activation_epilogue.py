"""The activation of a linear left to cuBLAS, in cuBLASLt's epilogue: ``aten._addmm_activation``.

The linears cuBLAS keeps (too large for ours, or of too few tiles: ``match``) run as ``addmm``,
and their activation as a kernel after it, Inductor's, which reads and writes the product again.
cuBLASLt adds the bias and applies GELU's tanh form or ReLU in the GEMM's epilogue instead: one
launch, the product written once. H200, torch 2.11, CUDA graphs, medians
(``benchmarks/addmm_activation_probe.py``): bf16 x [m, 768] by [768, 3072] (GPT-2 small's FFN-up),
addmm then GELU against ``_addmm_activation``: 1024 rows 13.9 -> 10.9 us, 4096 46.7 -> 35.1,
16384 185.5 -> 142.1; [1024, 2048] by [2048, 8192] 65.1 -> 54.3 (fp16 alike). Its error against
float64 is below the two kernels' (1.7e-3 against 2.4e-3 relative, bf16): the product is not
rounded to 16 bits before the activation.

``fuse`` rewrites, in the exported graph before Inductor, each ``addmm(bias, x, W)`` or
``linear(x, W, bias)`` by a weight of the program whose product is used only by an activation
(views of it and pointwise ops of it alone, ending in one value) that computes GELU's tanh
form or ReLU: told by running those ops in float64 on probe values, so that
``gelu(approximate="tanh")``, transformers' ``gelu_new`` written out (GPT-2, Phi) and BLOOM's
variant are all found. GELU's exact form (BERT's, ViT's) has no cuBLASLt epilogue (its GELU is
the tanh form: 9.3e-6 from it in float32, 4.8e-4 from the exact one, H200): it stays Inductor's
kernel. The program calls the op through ``runtime/ops.py``: on the CPU (the interpreter), where
torch's kernel takes GELU's exact form, it computes the tanh form, as CUDA does.
"""

from __future__ import annotations

import torch

from ..common import meta_value, recompiled
from .dynamic_rows import same_shape

aten = torch.ops.aten
OP = aten._addmm_activation.default
_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
_POINTWISE = (aten.mul.Tensor, aten.mul.Scalar, aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor,
              aten.div.Tensor, aten.pow.Tensor_Scalar, aten.tanh.default, aten.relu.default, aten.gelu.default,
              aten.sigmoid.default, aten.clamp_min.default)
_IGNORED_USERS = (aten._assert_tensor_metadata.default,)  # export's dtype checks: they go with their value
_WINDOW = 24  # the activation's ops follow the product within this many nodes
_PROBE = torch.cat([torch.linspace(-8.0, 8.0, 801, dtype=torch.float64), torch.tensor([-30.0, 30.0, 1e-3, -1e-3])])
_ACTIVATIONS = {"gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh"), "relu": torch.relu}


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _users(node) -> list:
    return [u for u in node.users if u.target not in _IGNORED_USERS]


def _linear(node, weights: set):
    """``(x, W as [k, n] or its node to transpose, transposed, bias)`` of a biased matmul by a
    weight, or None."""
    if node.target is aten.addmm.default and not node.kwargs and len(node.args) == 3:
        bias, x, w = node.args
        if w in weights:
            return x, w, False, bias
        if w.target is aten.permute.default and list(w.args[1]) == [1, 0] and w.args[0] in weights:
            return x, w, False, bias  # W.T as the model wrote it: passed as it is
    if node.target is aten.linear.default and not node.kwargs and len(node.args) == 3 and node.args[1] in weights:
        x, w, bias = node.args
        return x, w, True, bias
    return None


def _activation(graph_nodes: list, start: int, product):
    """``(kind, last, members)`` where the ops after ``product`` (at ``start``) are views of it and
    pointwise ops of it alone ending in ``last``, which computes a known activation; else None."""
    members = {product: None}
    for node in graph_nodes[start + 1:start + 1 + _WINDOW]:
        inputs = node.all_input_nodes
        if node.op != "call_function" or not inputs or any(a not in members for a in inputs):
            continue
        if node.target in _VIEWS or node.target in _POINTWISE and not _extra_kwargs(node):
            members[node] = None
    for last in reversed(list(members)):
        if last is product:
            return None
        if last.target in _VIEWS:  # a view of the activation: its users keep it
            continue
        region, stack = set(), [last]
        while stack:
            node = stack.pop()
            if node not in region:
                region.add(node)
                stack += [a for a in node.all_input_nodes if a is not product]
        region.add(product)
        if any(u not in region for r in region if r is not last for u in _users(r)):
            continue
        views = [n for n in region if n.target in _VIEWS]
        if len(views) > 1 or views and views[0].args[0] is not product:  # one view, of the product: kept
            continue
        kind = _computes(region, product, last)
        return (kind, last, region) if kind else None
    return None


def _extra_kwargs(node) -> bool:
    return bool(set(node.kwargs) - {"approximate"})


def _computes(region: set, product, last) -> str | None:
    """Which activation the ops of ``region`` from ``product`` to ``last`` compute, told by
    running them in float64 on probe values (views as the identity); None: none known."""
    values = {product: _PROBE}
    order = {n: i for i, n in enumerate(product.graph.nodes)}
    try:
        for node in sorted(region - {product}, key=order.get):
            if node.target in _VIEWS:
                values[node] = values[node.args[0]]
                continue
            args = [values[a] if isinstance(a, torch.fx.Node) else a for a in node.args]
            values[node] = node.target(*args, **node.kwargs)
    except (RuntimeError, TypeError):
        return None
    got = values[last]
    for kind, fn in _ACTIVATIONS.items():
        want = fn(_PROBE)
        if got.shape == want.shape and ((got - want).abs() <= 1e-6 * (1.0 + want.abs())).all():
            return kind
    return None


def fuse(ep) -> int:
    """Rewrite, in place in the ExportedProgram ``ep``, each biased linear of 16 or 32 bits whose
    product only an activation of cuBLASLt's epilogue uses into ``aten._addmm_activation``;
    returns how many."""
    from torch.export.graph_signature import InputKind

    graph = ep.graph
    names = {s.arg.name for s in ep.graph_signature.input_specs
             if s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR, InputKind.BUFFER)}
    weights = {n for n in graph.nodes if n.op == "placeholder" and n.name in names and _val(n).dim() == 2}
    fused = 0
    nodes = list(graph.nodes)
    for i, node in enumerate(nodes):
        found = _linear(node, weights)  # (the nodes a rewrite erases are its activation's, not linears)
        if not found:
            continue
        x, w, transposed, bias = found
        product = _val(node)
        if (product.dtype not in (torch.float16, torch.bfloat16, torch.float32) or bias is None
                or _val(bias).dim() != 1 or not same_shape(_val(bias).shape, product.shape[-1:])
                or _val(x).dtype != product.dtype or _val(bias).dtype != product.dtype):
            continue
        found = _activation(nodes, i, node)
        if found is None or _val(found[1]).dtype != product.dtype:
            continue
        _replace(graph, node, x, w, transposed, bias, *found)
        fused += 1
    return recompiled(ep, fused, dead_code=True)


def _replace(graph, product, x, w, transposed, bias, kind: str, last, region: set) -> None:
    """``product`` made ``_addmm_activation``'s (its rows flattened and restored for a linear's
    leading dims), the one view of it kept, and ``last`` replaced by what it was computed from."""
    x_val = _val(x)
    with graph.inserting_before(product):
        rows = graph.call_function(aten.reshape.default, (x, [-1, x_val.shape[-1]])) if transposed else x
        w_kn = graph.call_function(aten.permute.default, (w, [1, 0])) if transposed else w
        call = graph.call_function(OP, (bias, rows, w_kn), {"use_gelu": kind == "gelu"})
        made = [rows, w_kn, call] if transposed else [call]
        result = call
        if transposed and x_val.dim() != 2:
            lead = [_size(graph, x, d) for d in range(x_val.dim() - 1)]
            result = graph.call_function(aten.reshape.default, (call, [*lead, _val(w).shape[0]]))
            made.append(result)
    for n in made:
        n.meta["val"] = n.target(*(meta_value(a) for a in n.args), **n.kwargs)
    result.meta.update({k: v for k, v in product.meta.items() if k != "val"})
    view = next((n for n in region if n.target in _VIEWS), None)
    product.replace_all_uses_with(result)
    last.replace_all_uses_with(view if view is not None else result)
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in sorted(region - {view}, key=order.get, reverse=True):
        for user in list(node.users):
            if user.target in _IGNORED_USERS:
                graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)


def _size(graph, x, d: int):
    """Dim ``d`` of ``x``: an int, or a ``sym_size`` node where it is symbolic."""
    size = _val(x).shape[d]
    if isinstance(size, int):
        return size
    node = graph.call_function(aten.sym_size.int, (x, d))
    node.meta["val"] = size
    return node

