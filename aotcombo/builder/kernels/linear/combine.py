"""Linears that read the same input become one matmul over weights concatenated at build time.

q/k/v projections, gate/up, experts fed the same tokens: ``linear(x, W_i[, b_i])`` for several
parameters ``W_i`` of one input ``x`` is, in the exported graph, replaced by one
``linear(x, cat(W_i)[, cat(b_i)])`` whose output columns are sliced back into the original
values, before Inductor sees the graph: one extern matmul launch instead of several, and the
code after it written for the slices. The concatenated weight is a new weight of the
program named by its parts joined with ``|`` (``q.weight|k.weight|v.weight``), made from the
model's tensors when the build reads them, and at load from the parts the caller gives
(``load(weights=state_dict)``; ``--weights external``), so it always follows its parts.

Only parameters used by that one linear are combined, of one dtype and input width. Where some
have a bias and others none (Whisper's k projection), the combined bias holds zeros for those:
a part named ``zeros:<rows>`` (``runtime.state.ZEROS``), made at load beside the parts the
caller gives. Weights the model dequantizes (``quant``) combine the same way over their bytes,
scales and zero points (buffers too), those of one layout, all with a bias or none; float8
``_scaled_mm`` calls of one quantized x with a scale per output channel, over their bytes,
scales and biases (``combine_float8``).

A residual added to the output of a linear without bias, ``linear(x, W) + r``, becomes
``addmm(r, x, W.T)`` (``fold_residuals``): cuBLAS adds it as the matmul's C input, and the
kernel that added it goes (the add is rounded once, after the fp32 accumulation, instead of
after the matmul's own rounding). Not where the sum goes on into an op Inductor writes a kernel
for (a norm): that kernel takes the add in, while cuBLAS would first copy the residual into
its output, a copy more on the GPU.

Tried, not kept (H100, 2026-12-05): there too, with a bias (added after, in the norm's kernel),
where the residual is dead after the matmul, the program passing the residual as ``out`` too
(no copy; the residual stream in one buffer), so that the norm reads two tensors, not three.
BERT-base built with ``--dynamic batch=1:32,seq=1:512``, both packages in turn in one run, ms:
32 x 512 7.264 -> 7.286, 16 x 256 1.844 -> 1.866, 8 x 383 1.494 -> 1.452, 4 x 129 0.565 -> 0.544,
8 x 128 0.683 -> 0.674; the norms (Inductor's kernels, 22.5 us at 32 x 512) were at the copy's
bandwidth already, and cuBLAS's matmul reading C took what they saved.
"""

from __future__ import annotations

import operator
import re

import torch

from ....runtime.state import ZEROS
from ..common import recompiled
from .quant import is_dequantize, parts as dequantize_parts

SEPARATOR = "|"


def parts(name: str) -> list[str] | None:
    """The weights a combined weight is made of (None: ``name`` is the model's own)."""
    return name.split(SEPARATOR) if SEPARATOR in name else None


def zero_rows(part: str) -> int | None:
    """The rows of a part of zeros (a bias a linear lacks), None for a tensor of the model."""
    return int(part.removeprefix(ZEROS)) if part.startswith(ZEROS) else None


def combined(model: torch.nn.Module, name: str) -> torch.Tensor:
    """The combined weight ``name`` made from ``model``'s tensors (and zeros for its ``ZEROS`` parts)."""
    found = {p: operator.attrgetter(p)(model).detach() for p in parts(name) if zero_rows(p) is None}
    like = next(iter(found.values()))
    return torch.cat([found[p] if p in found else like.new_zeros(zero_rows(p), *like.shape[1:]) for p in parts(name)])


def combine(ep, model: torch.nn.Module) -> int:
    """Combine, in place in the ExportedProgram ``ep``, the linears of each input that reads
    several; returns how many linears were folded into others."""
    from torch.export.graph_signature import InputKind

    aten = torch.ops.aten
    graph, signature = ep.graph, ep.graph_signature
    params = {s.arg.name: s for s in signature.input_specs if s.kind == InputKind.PARAMETER}
    written = {s.target for s in signature.output_specs if s.target}
    buffers = {s.arg.name: s for s in signature.input_specs if s.kind == InputKind.BUFFER and s.target not in written}
    groups: dict = {}
    for node in graph.nodes:
        if node.target is not aten.linear.default or node.kwargs:
            continue
        x, weight, bias = (*node.args, None)[:3]
        if bias is not None and (bias.name not in params or len(bias.users) != 1):
            continue
        if is_dequantize(weight):  # its bytes, scale and zero: parameters or buffers read there alone
            q, operands, _ = dequantize_parts(weight)
            if len(weight.users) == 1 and all(t.name in params.keys() | buffers.keys() and len(t.users) == 1
                                              for t in (q, *operands)):
                groups.setdefault((x, weight.args[2], q.meta["val"].dtype, q.meta["val"].shape[1], len(operands),
                                   "with a bias" if bias is not None else "without"), []).append(node)
            continue
        if weight.name not in params or len(weight.users) != 1:
            continue
        w = weight.meta["val"]
        groups.setdefault((x, w.dtype, w.shape[1]), []).append(node)
    folded = 0
    for (x, *_), nodes in groups.items():
        if len(nodes) < 2:
            continue
        weights = [n.args[1] for n in nodes]
        given = [(*n.args, None)[2] for n in nodes]  # a bias or None each (mixed: unquantized weights only)
        biases = [b for b in given if b is not None]
        tensors, parts_of_dequantized = {**params, **buffers}, []
        if is_dequantize(weights[0]):
            weight, parts_of_dequantized = _combined_dequantize(ep, model, weights, tensors)
        else:
            weight = combined_input(ep, model, weights, params)
        bias = None
        if biases:  # a part of zeros for each linear without one
            bias = combined_input(ep, model, biases, params, [
                b if b is not None else f"{ZEROS}{w.meta['val'].shape[0]}" for b, w in zip(given, weights)])
        new_inputs = [weight] + ([bias] if bias is not None else [])
        with graph.inserting_before(nodes[0]):
            fused = graph.call_function(aten.linear.default, (x, *new_inputs))
            start = 0
            for n in nodes:
                width = n.args[1].meta["val"].shape[0]
                piece = graph.call_function(aten.slice.Tensor, (fused, -1, start, start + width))
                piece.meta.update(n.meta)
                n.replace_all_uses_with(piece)
                start += width
        fused.meta["val"] = torch.ops.aten.linear.default(x.meta["val"], *(i.meta["val"] for i in new_inputs))
        for n in nodes:
            graph.erase_node(n)
        for old in weights + biases + parts_of_dequantized:
            if not is_dequantize(old):
                signature.input_specs.remove(tensors[old.name])
            graph.erase_node(old)
        folded += len(nodes) - 1
    from .combine_float8 import combine_scaled_mm  # it imports combined_input from here

    folded += combine_scaled_mm(ep, model, {**params, **buffers})
    if folded:
        graph.lint()
        ep.graph_module.recompile()
    return folded


def _combined_dequantize(ep, model, nodes: list, tensors: dict):
    """One dequantize node over the concatenated bytes, scales and zero points of the
    dequantize ``nodes`` (of one layout), placed before the first; and the placeholders of
    their parts, which go once the nodes have gone."""
    columns = list(zip(*([dequantize_parts(n)[0], *dequantize_parts(n)[1]] for n in nodes)))
    leaves = [combined_input(ep, model, list(column), tensors) for column in columns]
    with ep.graph.inserting_before(nodes[0]):
        made = ep.graph.call_function(torch.ops.aotcombo.dequantize.default, (leaves[0], leaves[1:], nodes[0].args[2]))
    made.meta["val"] = made.target(leaves[0].meta["val"], [c.meta["val"] for c in leaves[1:]], nodes[0].args[2])
    return made, [old for column in columns for old in column]


def combined_input(ep, model, nodes: list, params: dict, order: list | None = None):
    """A new constant input of ``ep``, placed before the first of the parameter placeholders
    ``nodes``, holding their concatenation: its placeholder node. ``order``: the parts in
    order, each one of ``nodes`` or a ``ZEROS`` part's name (default: ``nodes``)."""
    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

    name = SEPARATOR.join(p if isinstance(p, str) else params[p.name].target for p in order or nodes)
    real = combined(model, name)
    with ep.graph.inserting_before(nodes[0]):
        placeholder = ep.graph.placeholder("c_combined_" + re.sub(r"\W", "_", name))
    placeholder.meta["val"] = nodes[0].meta["val"].new_empty(real.shape)  # a fake tensor of the same mode and device
    specs = ep.graph_signature.input_specs
    specs.insert(specs.index(params[nodes[0].name]),
                 InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(placeholder.name), target=name))
    ep.constants[name] = real
    return placeholder


_aten = torch.ops.aten
_MATMULS = frozenset({_aten.linear.default, _aten.addmm.default, _aten.mm.default, _aten.bmm.default,
                      _aten.matmul.default})
_VIEWS = frozenset({_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default, _aten.permute.default,
                    _aten.transpose.int, _aten.t.default, _aten.unsqueeze.default, _aten.squeeze.dim,
                    _aten.expand.default})


def _taken_into_a_kernel(node) -> bool:
    """Whether ``node`` (through views) is used by an op Inductor writes a kernel for: one that
    can take the add in (a norm after a residual), where cuBLAS's addmm would first copy the
    residual into its output (a copy more on the GPU: the Llama block's first residual)."""
    for user in node.users:
        if user.op == "output" or user.target in _MATMULS:
            continue
        if user.target not in _VIEWS or _taken_into_a_kernel(user):
            return True
    return False


def fold_residuals(ep) -> int:
    """``add(linear(x, W), r)`` (either order, no bias, alpha 1, same shape and dtype, the
    linear used only there, the sum used by no op Inductor would take the add into) becomes
    ``addmm(r, x, W.T)``, in place; returns how many."""
    aten = torch.ops.aten
    graph, folded = ep.graph, 0
    for add in list(graph.nodes):
        if add.target is not aten.add.Tensor or add.kwargs or len(add.args) != 2 or _taken_into_a_kernel(add):
            continue
        for linear, residual in (add.args, add.args[::-1]):
            if (isinstance(linear, torch.fx.Node) and linear.target is aten.linear.default
                    and not is_dequantize(linear.args[1])  # its kernel of ours adds r after the product
                    and (len(linear.args) == 2 or linear.args[2] is None) and len(linear.users) == 1
                    and isinstance(residual, torch.fx.Node)):
                out, r = linear.meta["val"], residual.meta["val"]
                if isinstance(r, torch.Tensor) and r.shape == out.shape and r.dtype == out.dtype:
                    break
        else:
            continue
        x, weight = linear.args[:2]
        k, n = weight.meta["val"].shape[1], weight.meta["val"].shape[0]
        with graph.inserting_before(add):
            nodes = [graph.call_function(aten.reshape.default, (x, [-1, k])),
                     graph.call_function(aten.permute.default, (weight, [1, 0])),
                     graph.call_function(aten.reshape.default, (residual, [-1, n]))]
            mm = graph.call_function(aten.addmm.default, (nodes[2], nodes[0], nodes[1]))
            result = graph.call_function(aten.reshape.default, (mm, list(out.shape)))
        for node in (*nodes, mm, result):
            node.meta["val"] = node.target(*(a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args))
        result.meta.update({key: value for key, value in add.meta.items() if key != "val"})
        add.replace_all_uses_with(result)
        graph.erase_node(add)
        graph.erase_node(linear)
        folded += 1
    return recompiled(ep, folded)
