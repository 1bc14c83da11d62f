"""A convolution's BatchNorm folded into its weights, and its bias, a residual and ReLU in cuDNN's
epilogue: ``aotcombo::fused_conv``.

An inference ResNet computes ``relu(bn(conv(x)))`` and ``relu(bn(conv(x)) + residual)``. Inductor
keeps the convolution cuDNN's and runs the BatchNorm, the add and ReLU as a kernel after it, which
reads and writes the convolution's output again: ResNet-50 makes 53 convolutions and 52 such
kernels a forward. ``fuse`` rewrites, in the exported graph before Inductor, each such chain whose
convolution (2-d, 16-bit) and BatchNorm read weights into one ``fused_conv``:

- the BatchNorm folded into the convolution: ``W * s`` and ``beta - mean * s`` (+ its bias ``* s``)
  with ``s = gamma / sqrt(var + eps)``, in float32 and rounded once, by ops on weights alone, so
  that the package computes them once at load (``plan/at_load.py``), the weight channels last;
- a residual that is itself a BatchNorm'd convolution (a downsampling shortcut) read as the bare
  convolution, its folded bias added into this one's;
- an image's 3 channels (a stem's) padded to 4 with zeros, in the copy that makes x channels last
  and in the folded weight: cuDNN's first-layer kernel takes 4, and with 3 it pads x on every call
  (two memsets and two padding kernels). ResNet-50's stem at batch 8: 33.4 -> 22.3 us a call, the
  padding a copy of x of 10.7 us made in the one the program already does (H200,
  ``benchmarks/stem_probe.py``); the full-size package 0.514 / 0.499 -> 0.482 / 0.485 ms a call
  (``scripts/ab_bench.sh``, A B A B). Not with a dynamic batch (``_extra_channels``).

The program calls it through runtime/ops.py ``fused_conv``: with ReLU on CUDA one cuDNN call
(``cudnn_convolution_relu``, ``cudnn_convolution_add_relu``), channels last in and out.
H200, torch 2.11, cuDNN 9.19 (``benchmarks/conv_epilogue_probe.py``, 2026-12-04): ResNet-50 at batch
8, fp16, channels last, in CUDA graphs, the folded network through cuDNN's fused calls 0.504 ms,
through the convolution and torch's bias and ReLU ops 0.836, eager 1.011; the package before this
0.580 ms; relative L2 against float32 eager 3.5e-2 (eager's own 3.1e-2: the folded weights are
rounded to 16 bits once). cuDNN's first call at each shape builds its plan (262 ms for the whole
network there, once a process).
"""

from __future__ import annotations

import operator

import torch
from torch.fx.operator_schemas import normalize_function

from ....runtime import ops
from ..common import meta_value, recompiled

aten = torch.ops.aten
OP = "aotcombo::fused_conv"
_CONVS = (aten.conv2d.default, aten.convolution.default)
_NORMS = (aten._native_batch_norm_legit_no_training.default, aten.native_batch_norm.default)
_DTYPES = (torch.float16, torch.bfloat16)
PADDED_CHANNELS = {3: 4}  # input channels cuDNN pads per call -> the count the program pads them to, once


@torch.library.custom_op(OP, mutates_args=(), tags=(torch.Tag.needs_fixed_stride_order,))
def fused_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None,
               stride: list[int], padding: list[int], dilation: list[int], groups: int, relu: bool) -> torch.Tensor:
    """``relu?(conv2d(x, weight) + bias + residual)``, channels last: the program's call (runtime/ops.py)."""
    return ops.fused_conv(x, weight, bias, residual, stride, padding, dilation, groups, relu)


@fused_conv.register_fake
def _(x, weight, bias, residual, stride, padding, dilation, groups, relu):
    out = aten.convolution.default(x, weight, None, stride, padding, dilation, False, [0, 0], groups)
    return out.contiguous(memory_format=torch.channels_last)


def _conv_bn(node, weights: set) -> dict | None:
    """The parts of ``node`` when it is ``bn(conv(x))`` (BatchNorm's output 0), each of the two
    used only by the next, their parameters weights: else None."""
    if node.target is not operator.getitem or node.args[1] != 0:
        return None
    bn = node.args[0]
    if bn.target not in _NORMS or len(bn.users) != 1:
        return None
    if bn.target is aten.native_batch_norm.default:
        conv, gamma, beta, mean, var, training, _momentum, eps = bn.args
        if training:
            return None
    else:
        conv, gamma, beta, mean, var, _momentum, eps = bn.args
    if conv.target not in _CONVS or len(conv.users) != 1 or mean not in weights or var not in weights:
        return None
    if any(p is not None and p not in weights for p in (gamma, beta)):
        return None
    a = normalize_function(conv.target, conv.args, conv.kwargs, normalize_to_only_use_kwargs=True).kwargs
    out = meta_value(conv)
    if (a["weight"] not in weights or a["bias"] is not None and a["bias"] not in weights or a.get("transposed")
            or out is None or out.dim() != 4 or out.dtype not in _DTYPES or meta_value(a["input"]).dtype != out.dtype
            or meta_value(a["weight"]).dtype != out.dtype or isinstance(a["padding"], str)):
        return None
    return {"x": a["input"], "weight": a["weight"], "conv_bias": a["bias"], "gamma": gamma, "beta": beta,
            "mean": mean, "var": var, "eps": eps, "stride": list(a["stride"]), "padding": list(a["padding"]),
            "dilation": list(a["dilation"]), "groups": a["groups"], "dtype": out.dtype}


class _Builder:
    """New nodes before ``at``, each with its fake value."""

    def __init__(self, graph, at):
        self.graph, self.at = graph, at

    def __call__(self, target, *args, **kwargs):
        with self.graph.inserting_before(self.at):
            node = self.graph.call_function(target, args, kwargs)
        node.meta["val"] = target(*meta_value(args), **{k: meta_value(v) for k, v in kwargs.items()})
        return node

    def padded(self, node, extra: int):
        """``node`` (sizes fixed) with ``extra`` zero channels after its own."""
        return self(aten.constant_pad_nd.default, node, [0, 0, 0, 0, 0, extra])

    def f32(self, node):
        return self(aten._to_copy.default, node, dtype=torch.float32)

    def folded(self, c: dict, x):
        """(W * s channels last, the folded bias in float32) of one conv-BatchNorm reading ``x``
        (its channels padded: W's too)."""
        scale = self(aten.rsqrt.default, self(aten.add.Scalar, self.f32(c["var"]), c["eps"]))
        if c["gamma"] is not None:
            scale = self(aten.mul.Tensor, self.f32(c["gamma"]), scale)
        weight = self(aten.mul.Tensor, self.f32(c["weight"]), self(aten.view.default, scale, [-1, 1, 1, 1]))
        weight = self(aten._to_copy.default, weight, dtype=c["dtype"])
        extra = meta_value(x).shape[1] - meta_value(c["x"]).shape[1]
        if extra:
            weight = self.padded(weight, extra)
        weight = self(aten.clone.default, weight, memory_format=torch.channels_last)
        shift = self(aten.mul.Tensor, self.f32(c["mean"]), scale)
        bias = (self(aten.sub.Tensor, self.f32(c["beta"]), shift) if c["beta"] is not None
                else self(aten.neg.default, shift))
        if c["conv_bias"] is not None:
            bias = self(aten.add.Tensor, bias, self(aten.mul.Tensor, self.f32(c["conv_bias"]), scale))
        return weight, bias

    def conv(self, c: dict, x, weight, bias, residual, relu: bool):
        return self(torch.ops.aotcombo.fused_conv.default, x, weight, bias, residual, c["stride"], c["padding"],
                    c["dilation"], c["groups"], relu)


def _match(relu, weights: set):
    """(main conv-BatchNorm, residual node or None) of ``relu(bn(conv(x)) [+ residual])``, or None."""
    a = relu.args[0]
    if len(a.users) != 1:
        return None
    main = _conv_bn(a, weights)
    if main is not None:
        return main, None
    if a.target is not aten.add.Tensor or a.kwargs or not all(isinstance(t, torch.fx.Node) for t in a.args):
        return None
    for lhs, rhs in (a.args, a.args[::-1]):
        main = _conv_bn(lhs, weights) if len(lhs.users) == 1 else None
        val = meta_value(rhs)
        if main and val is not None and val.dtype == main["dtype"] and tuple(val.shape) == tuple(meta_value(a).shape):
            return main, rhs
    return None


def fuse(ep) -> int:
    """Rewrite, in place in the ExportedProgram ``ep``, each ``relu(bn(conv(x)) [+ residual])`` of
    weights into ``aotcombo::fused_conv``; returns how many."""
    from torch.export.graph_signature import InputKind

    graph = ep.graph
    names = {s.arg.name for s in ep.graph_signature.input_specs
             if s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR, InputKind.BUFFER)}
    weights = {n for n in graph.nodes if n.op == "placeholder" and n.name in names}
    made: set = set()
    channels_last: dict = {}  # x -> its channels-last copy, one per x
    for relu in [n for n in graph.nodes if n.target is aten.relu.default]:
        found = _match(relu, weights)
        if found is None:
            continue
        main, residual = found
        new = _Builder(graph, relu)
        x = _in_channels_last(new, main["x"], made, channels_last)
        weight, bias = new.folded(main, x)
        shortcut = _conv_bn(residual, weights) if residual is not None and len(residual.users) == 1 else None
        if shortcut is not None:  # the shortcut's convolution bare, its bias in this one's
            x_short = _in_channels_last(new, shortcut["x"], made, channels_last)
            w_short, b_short = new.folded(shortcut, x_short)
            residual = new.conv(shortcut, x_short, w_short, None, None, relu=False)
            made.add(residual)
            bias = new(aten.add.Tensor, bias, b_short)
        bias = new(aten._to_copy.default, bias, dtype=main["dtype"])
        out = new.conv(main, x, weight, bias, residual, relu=True)
        out.meta.update({k: v for k, v in relu.meta.items() if k != "val"})
        relu.replace_all_uses_with(out)
        graph.erase_node(relu)
        made.add(out)
    if made:
        graph.eliminate_dead_code()
        _refresh_values(graph, made)
    return recompiled(ep, len(made), dead_code=True)


def _extra_channels(x) -> int:
    """The zero channels x and its weights get (``PADDED_CHANNELS``): none where a size of x is
    symbolic (a dynamic batch: constant_pad_nd's fake kernel would fix it to the example's, and
    a cat is three kernels, not one)."""
    shape = meta_value(x).shape
    if not all(isinstance(size, int) for size in shape):
        return 0
    return PADDED_CHANNELS.get(shape[1], shape[1]) - shape[1]


def _in_channels_last(new: _Builder, x, made: set, copies: dict):
    """``x`` as cuDNN reads it best: an output of ours is channels last; anything else is copied so
    once, its channels padded (``PADDED_CHANNELS``; Inductor writes the copy in the kernel that
    makes ``x``)."""
    if x in made:
        return x
    if x not in copies:
        after = _Builder(new.graph, x.next)
        extra = _extra_channels(x)
        copies[x] = after(aten.clone.default, after.padded(x, extra) if extra else x,
                          memory_format=torch.channels_last)
    return copies[x]


def _refresh_values(graph, made: set) -> None:
    """The fake values of the nodes after the rewritten ones made again: ours are channels last,
    and Inductor gives each of our calls its inputs in their values' stride order."""
    changed = set(made)
    for node in graph.nodes:
        if node in changed or node.op != "call_function" or not any(a in changed for a in node.all_input_nodes):
            continue
        if hasattr(node.target, "_schema") or node.target is operator.getitem:  # an op, or an output of one
            try:
                node.meta["val"] = node.target(*meta_value(node.args),
                                               **{k: meta_value(v) for k, v in node.kwargs.items()})
            except Exception:  # noqa: BLE001 - a value we cannot remake keeps the one export gave it
                continue
            changed.add(node)
