"""Weights held as tensor subclasses (torchao's ``quantize_``), before the build sees the model.

torchao 0.18's weight-only configs make each ``nn.Linear``'s weight a tensor subclass holding
int8 ``qdata`` [N, K], a ``scale`` and a ``zero_point`` per group of ``block_size[1]`` along K:
``Int8Tensor`` (``Int8WeightOnlyConfig``: a scale per output channel, zero points of zeros) and
``IntxUnpackedToInt8Tensor`` (``IntxWeightOnlyConfig``: int1..int8 values, one a byte, a scale
and zero point per group or per channel; symmetric int4 is packed two values a byte,
``PackedInt4Linear``). ``flatten`` gives a copy of the model in which each
such linear is a ``FlattenedLinear`` over plain buffers ``<layer>.weight.qdata``, ``.scale``
(and ``.zero_point``, in the scale's dtype, where not all zero) that dequantizes in torch ops,
which ``quant_match`` reads like any hand-written int8 linear (a decode step's are kernels of
ours). The dynamic-activation configs (``Int8DynamicActivationInt8WeightConfig``: an
``Int8Tensor`` with ``act_quant_kwargs``; ``Float8DynamicActivationFloat8WeightConfig``: a
``Float8Tensor``) become ``torchao_activation``'s linears, which quantize the activation per call
and multiply with ``aten._int_mm`` or ``aten._scaled_mm``. Any other subclass is refused with
an ``UnsupportedModelError`` naming it and the layer. torchao is never imported: its tensors are
read through their attributes.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from ....errors import UnsupportedModelError
from .quant import Quant, dequantize_eager
from .torchao_activation import float8_dynamic, int8_dynamic

SUPPORTED = ("torchao's Int8Tensor (Int8WeightOnlyConfig, Int8DynamicActivationInt8WeightConfig), "
             "IntxUnpackedToInt8Tensor (IntxWeightOnlyConfig) and Float8Tensor "
             "(Float8DynamicActivationFloat8WeightConfig) on an nn.Linear's weight")
FIX = ("quantize the linears with torchao's Int8WeightOnlyConfig, IntxWeightOnlyConfig, "
       "Int8DynamicActivationInt8WeightConfig or Float8DynamicActivationFloat8WeightConfig, or write the dequantize "
       "in torch ops over int8 or packed int4 buffers and scales (sample_models/quantized_decode.py), or build the "
       "model unquantized")
_ACTIVATIONS = {"Int8Tensor": "act_quant_kwargs", "IntxUnpackedToInt8Tensor": "activation_quantization"}


class FlattenedLinear(nn.Module):
    """An ``nn.Linear`` whose weight was a torchao subclass: its int8 ``qdata`` [N, K], ``scale``
    [N, groups] (and ``zero_point``) as buffers of a submodule ``weight``, the bias as it was."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None, bias):
        super().__init__()
        n = qdata.shape[0]
        self.weight = nn.Module()
        self.weight.register_buffer("qdata", qdata)
        self.weight.register_buffer("scale", scale.reshape(n, -1))
        if zero is not None:
            self.weight.register_buffer("zero_point", zero.reshape(n, -1).to(scale.dtype))
        self.bias = bias

    def forward(self, x):
        q, scale = self.weight.qdata, self.weight.scale
        n, k = q.shape
        w = q.to(x.dtype).view(n, scale.shape[1], -1)
        if hasattr(self.weight, "zero_point"):
            w = w - self.weight.zero_point.to(x.dtype)[..., None]
        return F.linear(x, (w * scale.to(x.dtype)[..., None]).view(n, k), self.bias)


class PackedInt4Linear(nn.Module):
    """An ``nn.Linear`` whose weight was torchao's int4 (``IntxUnpackedToInt8Tensor``, one value
    in -8..7 a byte): the values two a byte as ``q + 8`` (even k in the low nibble), ``qdata``
    uint8 [N, K/2], and the ``scale`` [N, groups]; half the bytes a step reads."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, bias):
        super().__init__()
        n, k = qdata.shape
        nibbles = (qdata.to(torch.int16) + 8).to(torch.uint8)
        self.weight = nn.Module()
        self.weight.register_buffer("qdata", nibbles[:, 0::2] | (nibbles[:, 1::2] << 4))
        self.weight.register_buffer("scale", scale.reshape(n, -1))
        self.bias = bias
        self.spec = Quant(bits=4, group=k // self.weight.scale.shape[1], high_first=False, zero="none",
                          zero_value=8.0, dtype=str(scale.dtype).removeprefix("torch."))

    def forward(self, x):
        w = dequantize_eager(self.weight.qdata, self.weight.scale, None, self.spec)
        return F.linear(x, w.to(x.dtype), self.bias)


def _is_subclass(t) -> bool:
    return isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, nn.Parameter) and hasattr(
        t, "__tensor_flatten__")


def _kind(t) -> str:
    return f"{type(t).__module__}.{type(t).__qualname__}"


_INT4_FIX = ("for int4 weights use IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128)) "
             "(Int4WeightOnlyConfig's formats need the mslk package or a GPU to quantize and are read by neither); ")


def _refuse(where: str, t, why: str):
    fix = _INT4_FIX + FIX if type(t).__name__.startswith("Int4") else FIX
    raise UnsupportedModelError(f"{where} is a {_kind(t)}, a tensor subclass {why}; aotcombo reads {SUPPORTED}",
                                fix=fix)


def _flattened(layer: str, linear: nn.Linear, t, archs) -> nn.Module:
    """The plain linear of an ``nn.Linear`` over a torchao subclass, or a refusal saying why not."""
    where, kind = f"layer {layer}'s weight", type(t).__name__
    if kind == "Float8Tensor":
        return float8_dynamic(where, linear, t, archs)
    if kind not in _ACTIVATIONS:
        _refuse(where, t, "aotcombo cannot read")
    if kind == "Int8Tensor" and t.act_quant_kwargs is not None:
        return int8_dynamic(where, linear, t)
    if getattr(t, _ACTIVATIONS[kind], None) is not None:
        _refuse(where, t, "that quantizes the activations too (a dynamic-activation config other than "
                          "Int8DynamicActivationInt8WeightConfig)")
    qdata, scale, zero = (getattr(t, a, None) for a in ("qdata", "scale", "zero_point"))
    block = list(getattr(t, "block_size", []) or [])
    n, k = t.shape
    if (not isinstance(qdata, torch.Tensor) or qdata.dtype != torch.int8 or tuple(qdata.shape) != (n, k)
            or len(block) != 2 or block[0] != 1 or k % block[1] or not isinstance(scale, torch.Tensor)
            or scale.numel() != n * (k // block[1]) or zero is not None and zero.numel() != scale.numel()):
        _refuse(where, t, f"of a layout other than int8 [N, K] with a scale per group along K (block size {block})")
    if zero is not None and not bool(zero.ne(0).any()):
        zero = None  # symmetric
    if zero is None and getattr(t, "target_dtype", None) == torch.int4 and k % 2 == 0 and block[1] % 2 == 0:
        return PackedInt4Linear(qdata.detach(), scale.detach(), linear.bias)
    return FlattenedLinear(qdata.detach(), scale.detach(), None if zero is None else zero.detach(), linear.bias)


def flatten(model: nn.Module, archs=()) -> nn.Module:
    """``model``, or a copy of it whose linears over torchao's subclasses are plain
    (``FlattenedLinear``, ``Int8DynamicLinear``, ``Float8DynamicLinear``); refuses any other
    tensor subclass, naming it and its layer, and float8 for ``archs`` (e.g. ``(80, 90)``) older
    than sm_89."""
    replaced: dict = {}
    for layer, module in model.named_modules():
        for name, t in [*module._parameters.items(), *module._buffers.items()]:
            if not _is_subclass(t):
                continue
            if not (isinstance(module, nn.Linear) and name == "weight"):
                _refuse(f"{f'{layer}.' if layer else ''}{name}", t, "outside an nn.Linear's weight")
            replaced[id(module)] = _flattened(layer or "(the model)", module, t, archs)
    if not replaced:
        return model
    if id(model) in replaced:
        return replaced[id(model)]
    return copy.deepcopy(model, memo=dict(replaced))  # the rest copied, the user's model left as it is
