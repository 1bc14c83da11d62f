"""Float8 linears that read the same input become one ``_scaled_mm`` over weights concatenated at build time.

``torchao_activation.Float8DynamicLinear`` quantizes x per call and multiplies with
``aten._scaled_mm(xq, W.t(), x_scale, w_scale, bias, out_dtype=..., use_fast_accum=...)``. q/k/v
(gate/up) each quantize the same x the same way: in the exported graph those are identical
subgraphs, made one first (``share_quantized_inputs``); the ``_scaled_mm`` calls that then read
one ``xq`` and one x scale, with a scale per output channel of the weight (``PerRow``: the
weight's ``scale`` [N, 1] read as ``scale.t()``), become one over the concatenated float8 bytes
and scales (dim 0: N) and the biases, its output columns sliced back, as ``combine`` does for
``linear``: the same products per column, one cuBLAS launch that fills more of the GPU. The
concatenated tensors are weights named by their parts joined with ``|``, made from the model's
tensors at build time and from the parts given at load (``combine.combined_input``).

Only buffers or parameters read by that one call are combined, of one dtype and K, all with a
bias or none, of one ``out_dtype`` and ``use_fast_accum``; a weight scaled per tensor
(``PerTensor``: its own scale per linear, which no one ``_scaled_mm`` takes) is left as it is.

Not done: a linear of few tiles (Llama 3.2 1B at 512 rows: o and down, 64 tiles of cuBLAS's 128 x 128
for 132 multiprocessors) split along K into one ``_scaled_grouped_mm`` over the slices and their
partial sums added: on an H200 with torch 2.11 the grouped kernel ran 3-4x slower than the one
``_scaled_mm`` (down 23.5 against 34-41 us, o 8.9 against 28-34; benchmarks/float8_split_probe.py).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
# What Float8DynamicLinear's quantize of x is made of, once decomposed: the ops two identical
# quantizes of one x are made one over.
_QUANTIZE_OPS = frozenset({
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.abs.default, aten.amax.default,
    aten.div.Tensor, aten.div.Scalar, aten.mul.Tensor, aten.mul.Scalar, aten.reciprocal.default,
    aten._to_copy.default, aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default})
_ASSERT = aten._assert_tensor_metadata.default


def _key(value):
    """``value`` (an argument) as a hashable of the same meaning: lists as tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _key(v)) for k, v in value.items()))
    return value if isinstance(value, torch.fx.Node) else (type(value), value)


def share_quantized_inputs(graph: torch.fx.Graph) -> int:
    """Identical ops that quantize the inputs of ``_scaled_mm`` calls (x's bytes and scale,
    through ``_QUANTIZE_OPS`` back to what they read) made one, in place (and the metadata
    checks on the copies that go); returns how many nodes went."""
    cone: set = set()
    todo = [arguments_of(n)[a] for n in graph.nodes if n.target is aten._scaled_mm.default for a in ("self", "scale_a")]
    while todo:
        node = todo.pop()
        if isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in _QUANTIZE_OPS \
                and node not in cone:
            cone.add(node)
            todo.extend(node.all_input_nodes)
    seen, gone = {}, 0
    for node in list(graph.nodes):
        checks = node.target is _ASSERT and not node.users and any(a in cone for a in node.all_input_nodes)
        if node not in cone and not checks:
            continue
        key = (node.target, _key(node.args), _key(node.kwargs))
        if key not in seen:
            seen[key] = node
            continue
        node.replace_all_uses_with(seen[key])
        graph.erase_node(node)
        gone += 1
    return gone


def arguments_of(node) -> dict:
    """``node``'s arguments by the names of its op's schema, defaults filled in."""
    schema = node.target._schema.arguments
    given = {**{a.name: v for a, v in zip(schema, node.args)}, **node.kwargs}
    return {a.name: given[a.name] if a.name in given else a.default_value for a in schema}


def _leaf(node, tensors: dict, transposed: bool):
    """The placeholder of a weight ``node`` reads alone (through ``t`` where ``transposed``), or None."""
    if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
        return None
    if transposed:
        if node.target is not aten.t.default:
            return None
        node = node.args[0]
        if not isinstance(node, torch.fx.Node) or len(node.users) != 1:
            return None
    return node if node.op == "placeholder" and node.name in tensors else None


def combine_scaled_mm(ep, model: torch.nn.Module, tensors: dict) -> int:
    """Combine, in place in the ExportedProgram ``ep``, the per-row float8 ``_scaled_mm`` calls of
    each quantized input that several read; ``tensors``: the placeholders of the parameters and
    of the buffers never written, by name (their input specs). Returns how many calls were folded
    into others."""
    from .combine import combined_input

    graph, signature = ep.graph, ep.graph_signature
    shared = share_quantized_inputs(graph)
    groups: dict = {}
    for node in graph.nodes:
        if node.target is not aten._scaled_mm.default:
            continue
        a = arguments_of(node)
        weight, scale = _leaf(a["mat2"], tensors, True), _leaf(a["scale_b"], tensors, True)
        bias = a["bias"]
        if weight is None or scale is None or a["scale_result"] is not None or (
                bias is not None and _leaf(bias, tensors, False) is None):
            continue
        w, s = weight.meta["val"], scale.meta["val"]
        if s.dim() != 2 or tuple(s.shape) != (w.shape[0], 1) or w.shape[0] < 2:  # a scale per output channel
            continue
        groups.setdefault((a["self"], a["scale_a"], w.dtype, w.shape[1], s.dtype, bias is None, a["out_dtype"],
                           bool(a["use_fast_accum"])), []).append((node, weight, scale, bias))
    folded = 0
    for (x, x_scale, *_, out_dtype, fast), members in groups.items():
        if len(members) < 2:
            continue
        nodes = [m[0] for m in members]
        columns = [[m[i] for m in members] for i in (1, 2, 3) if members[0][i] is not None]
        old = [old for column in columns for old in column]
        made = [combined_input(ep, model, column, tensors) for column in columns]
        with graph.inserting_before(nodes[0]):
            weight_t = graph.call_function(aten.t.default, (made[0],))
            scale_t = graph.call_function(aten.t.default, (made[1],))
            fused = graph.call_function(aten._scaled_mm.default, (x, weight_t, x_scale, scale_t,
                                                                 made[2] if len(made) > 2 else None, None, out_dtype,
                                                                 fast))
            for new in (weight_t, scale_t, fused):
                new.meta["val"] = new.target(*(a.meta["val"] if isinstance(a, torch.fx.Node) else a
                                               for a in new.args))
            start = 0
            for n, weight, *_ in members:
                width = weight.meta["val"].shape[0]
                piece = graph.call_function(aten.slice.Tensor, (fused, -1, start, start + width))
                piece.meta.update(n.meta)
                n.replace_all_uses_with(piece)
                start += width
        for n in nodes:
            transposes = [u for u in n.all_input_nodes if u.target is aten.t.default]
            graph.erase_node(n)
            for u in transposes:
                graph.erase_node(u)
        for placeholder in old:
            signature.input_specs.remove(tensors[placeholder.name])
            graph.erase_node(placeholder)
        folded += len(nodes) - 1
    if shared and not folded:  # combine() recompiles where any were folded
        graph.lint()
        ep.graph_module.recompile()
    return folded
