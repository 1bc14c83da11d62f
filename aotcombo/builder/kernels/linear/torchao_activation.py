"""torchao's dynamic-activation configs as plain linears: the activation quantized per call in
torch ops, the weight's bytes and scales buffers, the product one public ATen matmul.

- ``Int8DynamicActivationInt8WeightConfig`` leaves an ``Int8Tensor`` with ``act_quant_kwargs``:
  int8 ``qdata`` [N, K] and a float32 scale per output channel (or one). ``Int8DynamicLinear``
  quantizes x as torchao does (a scale per row, or one: ``absmax / 127.5`` in x's dtype, at
  least float32's eps; ``round(x / scale)`` clamped to [-128, 127]), multiplies the bytes with
  ``aten._int_mm`` (int8 x int8 -> int32, exact), then by x's scale (rounded to x's dtype, as
  torchao rounds it) and the weight's, and adds the bias. cuBLAS's ``_int_mm`` takes more than
  16 rows and K, N multiples of 8: fewer rows (a decode step, or any size with a dynamic batch)
  are padded with 16 rows of zeros, and K, N with zeros to multiples of 8 (the bytes stored so),
  so the product stays exact; the padding is cut from the result.
- ``Float8DynamicActivationFloat8WeightConfig`` leaves a ``Float8Tensor``: float8_e4m3fn
  ``qdata`` [N, K] and a float32 scale, one (``PerTensor``, the default) or per output channel
  (``PerRow``, [N, 1] as torchao holds it, read as ``scale.t()``). ``Float8DynamicLinear``
  quantizes x the same way (``absmax / 448`` in x's dtype, per tensor or per row; ``x / scale``
  clamped to +-448, rounded to float8) and calls ``aten._scaled_mm`` with both scales, the bias
  and torchao's ``use_fast_accum``. Float8
  conversions and ``_scaled_mm`` need sm_89 or later: a build for an older arch is refused
  before any trace, naming the layer.

Only ``x``'s dtype of the weight's (torchao's ``dtype``) is read. What these configs can say and
these linears do not do (asymmetric or static activation scales, pre-scales, blockwise float8,
other float8 dtypes) is refused with an ``UnsupportedModelError`` naming it and the layer.
torchao is never imported: its tensors and their kwargs are read through their attributes.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ....errors import UnsupportedModelError

aten = torch.ops.aten
FP8_MIN_ARCH = 89
# torch 2.14 has a meta kernel for ``aten::_scaled_mm`` and none for its out variant, which
# Inductor's wrapper calls (its fake run during the trace would need a real GPU): this one
# checks the call through the functional meta kernel and returns ``out``.
_ATEN_META = torch.library.Library("aten", "IMPL")


def _scaled_mm_out_meta(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                        use_fast_accum=False, *, out):
    want = aten._scaled_mm.default(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype,
                                             use_fast_accum)
    if out.shape != want.shape or out.dtype != want.dtype:
        raise RuntimeError(f"_scaled_mm.out: out is {out.dtype} {list(out.shape)}, the product {want.dtype} "
                           f"{list(want.shape)}")
    return out


try:
    _ATEN_META.impl("_scaled_mm.out", _scaled_mm_out_meta, "Meta")
except RuntimeError:  # a torch that has its own (registering a second one is an error)
    pass
_INT8_FIX = ("quantize with Int8DynamicActivationInt8WeightConfig() as it comes (symmetric, per-row or per-tensor "
             "activation scales computed per call), or with Int8WeightOnlyConfig, or build the model unquantized")
_FP8_FIX = ("quantize with Float8DynamicActivationFloat8WeightConfig() (per tensor) or granularity=PerRow(), "
            "float8_e4m3fn weights and activations, or build the model unquantized")


def _name(value) -> str:
    """An enum member's or an object's name (torchao's ``MappingType.SYMMETRIC``, ``PerRow()``)."""
    return getattr(value, "name", None) or type(value).__name__


def _granularity(kwargs) -> str:
    name = _name(getattr(kwargs, "granularity", None))
    if name == "PerRow" and getattr(kwargs.granularity, "dim", -1) not in (-1, None):
        return f"PerRow(dim={kwargs.granularity.dim})"
    return name


def _refuse(where: str, t, what: str, fix: str):
    raise UnsupportedModelError(f"{where} is a {type(t).__module__}.{type(t).__qualname__} {what}", fix=fix)


def _weight_scale(where: str, t, n: int, fix: str) -> torch.Tensor:
    """The weight's scale, one per output channel (a row scale) or one: [1, N] or [1, 1] float32."""
    scale, block = getattr(t, "scale", None), list(getattr(t, "block_size", []) or [])
    k = t.shape[1]
    if not isinstance(scale, torch.Tensor) or not scale.is_floating_point() or scale.numel() not in (1, n) or (
            block not in ([1, k], [n, k])) or (scale.numel() == n) != (block == [1, k]):
        _refuse(where, t, f"with a weight scale of another layout than one per output channel or one (block size "
                          f"{block})", fix)
    return scale.detach().float().reshape(1, -1).contiguous()


class Int8DynamicLinear(nn.Module):
    """An ``nn.Linear`` over torchao's ``Int8Tensor`` with dynamic int8 activations: ``weight.qdata``
    int8 [N8, K8] (zeros past N, K: multiples of 8), ``weight.scale`` float32 [1, N] or [1, 1]."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, bias, per_row: bool, q_min: int, q_max: int):
        super().__init__()
        n, k = qdata.shape
        self.out_features, self.in_features = n, k
        self.weight = nn.Module()
        self.weight.register_buffer("qdata", F.pad(qdata, (0, -k % 8, 0, -n % 8)).contiguous())
        self.weight.register_buffer("scale", scale)
        self.bias = bias
        self.per_row, self.q_min, self.q_max = per_row, q_min, q_max

    def forward(self, x):
        k, n = self.in_features, self.out_features
        x2 = x.reshape(-1, k)
        m = x2.shape[0]
        absmax = x2.abs().amax(-1, keepdim=True) if self.per_row else x2.abs().amax().reshape(1, 1)
        x_scale = (absmax / ((self.q_max - self.q_min) / 2)).clamp(min=torch.finfo(torch.float32).eps).float()
        xq = torch.clamp(torch.round(x2 * (1.0 / x_scale)), self.q_min, self.q_max).to(torch.int8)
        pad_rows = 0 if isinstance(m, int) and m > 16 else 16  # cuBLAS's _int_mm: more than 16 rows
        xq = F.pad(xq, (0, -k % 8, 0, pad_rows))
        product = aten._int_mm.default(xq, self.weight.qdata.t())[:m, :n]
        y = (product.float() * x_scale).to(x.dtype) * self.weight.scale
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], n)


class Float8DynamicLinear(nn.Module):
    """An ``nn.Linear`` over torchao's ``Float8Tensor`` with dynamic float8 activations:
    ``weight.qdata`` float8_e4m3fn [N, K], ``weight.scale`` float32 [N, 1] (per row) or [1, 1]."""

    def __init__(self, qdata: torch.Tensor, scale: torch.Tensor, bias, per_row: bool, bounds: tuple,
                 fast_accum: bool):
        super().__init__()
        self.out_features, self.in_features = qdata.shape
        self.weight = nn.Module()
        self.weight.register_buffer("qdata", qdata)
        self.weight.register_buffer("scale", scale)
        self.bias = bias
        self.per_row, self.bounds, self.fast_accum = per_row, bounds, fast_accum

    def forward(self, x):
        f8 = torch.float8_e4m3fn
        top = torch.finfo(f8).max
        x2 = x.reshape(-1, self.in_features)
        absmax = x2.abs().amax(-1, keepdim=True) if self.per_row else x2.abs().amax().reshape(1, 1)
        low, high = self.bounds
        if low is not None or high is not None:
            absmax = absmax.clamp(min=low, max=high)
        x_scale = (absmax / top).float()
        xq = (x2.float() / x_scale).clamp(min=-top, max=top).to(f8)
        inside = self.bias if x.dtype != torch.float32 else None  # _scaled_mm: no bias with a float32 product
        w_scale = self.weight.scale.t() if self.per_row else self.weight.scale  # [1, N] (a view) or [1, 1]
        y = aten._scaled_mm.default(xq, self.weight.qdata.t(), x_scale, w_scale, bias=inside,
                                    out_dtype=x.dtype, use_fast_accum=self.fast_accum)
        if self.bias is not None and inside is None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


# --- reading torchao's tensors -------------------------------------------------------------

def int8_dynamic(where: str, linear: nn.Linear, t) -> Int8DynamicLinear:
    """The plain linear of an ``Int8Tensor`` that quantizes the activations, or a refusal."""
    kwargs, (n, k) = t.act_quant_kwargs, t.shape
    qdata = getattr(t, "qdata", None)
    if not isinstance(qdata, torch.Tensor) or qdata.dtype != torch.int8 or tuple(qdata.shape) != (n, k):
        _refuse(where, t, "with other bytes than int8 [N, K]", _INT8_FIX)
    for attribute, what in (("act_quant_scale", "a static activation scale (Int8StaticActivationInt8WeightConfig)"),
                            ("act_quant_zero_point", "a static activation zero point"),
                            ("act_pre_scale", "an activation pre-scale (AWQ, SmoothQuant)")):
        if getattr(t, attribute, None) is not None:
            _refuse(where, t, f"with {what}, which aotcombo does not read", _INT8_FIX)
    zero = getattr(t, "zero_point", None)
    if zero is not None and bool(zero.ne(0).any()):
        _refuse(where, t, "with weight zero points, which aotcombo does not read", _INT8_FIX)
    mapping, granularity = _name(getattr(kwargs, "mapping_type", None)), _granularity(kwargs)
    if mapping != "SYMMETRIC" or granularity not in ("PerRow", "PerTensor"):
        _refuse(where, t, f"quantizing the activations {mapping} {granularity}; aotcombo reads SYMMETRIC activation "
                          "quantization PerRow (the default) or PerTensor", _INT8_FIX)
    q_min, q_max = (-64, 63) if getattr(kwargs, "reduce_range", False) else (-128, 127)
    return Int8DynamicLinear(qdata.detach(), _weight_scale(where, t, n, _INT8_FIX), linear.bias,
                             granularity == "PerRow", q_min, q_max)


def float8_dynamic(where: str, linear: nn.Linear, t, archs) -> Float8DynamicLinear:
    """The plain linear of a ``Float8Tensor`` that quantizes the activations, or a refusal."""
    kwargs, (n, k) = getattr(t, "act_quant_kwargs", None), t.shape
    if kwargs is None:
        _refuse(where, t, "of float8 weights alone (Float8WeightOnlyConfig), which aotcombo does not read", _FP8_FIX)
    old = sorted(a for a in archs if a < FP8_MIN_ARCH)
    if old:
        raise UnsupportedModelError(
            f"{where} is a {type(t).__module__}.{type(t).__qualname__} (Float8DynamicActivationFloat8WeightConfig): "
            f"fp8 needs sm_89 or later, and this build is for {', '.join(f'sm_{a}' for a in old)}",
            fix="build with --arch sm_90 (or sm_89), or quantize the model for that GPU with "
                "Int8DynamicActivationInt8WeightConfig or Int8WeightOnlyConfig")
    qdata, f8 = getattr(t, "qdata", None), torch.float8_e4m3fn
    if (not isinstance(qdata, torch.Tensor) or qdata.dtype != f8 or tuple(qdata.shape) != (n, k)
            or getattr(kwargs, "float8_dtype", None) != f8):
        _refuse(where, t, f"with {getattr(qdata, 'dtype', None)} weights and {getattr(kwargs, 'float8_dtype', None)} "
                          "activations; aotcombo reads float8_e4m3fn for both", _FP8_FIX)
    if n % 16 or k % 16:
        _refuse(where, t, f"of shape [{n}, {k}]; aten._scaled_mm takes N and K multiples of 16", _FP8_FIX)
    granularity = _granularity(kwargs)
    scale = _weight_scale(where, t, n, _FP8_FIX)
    if granularity not in ("PerRow", "PerTensor") or (granularity == "PerRow") != (scale.numel() == n):
        _refuse(where, t, f"quantizing the activations {granularity} and the weight with {scale.numel()} scales; "
                          "aotcombo reads PerTensor (the default) or PerRow for both", _FP8_FIX)
    config = getattr(t, "mm_config", None)
    bounds = (getattr(kwargs, "hp_value_lb", None), getattr(kwargs, "hp_value_ub", None))
    if granularity == "PerRow":
        scale = scale.reshape(n, 1)  # as torchao holds it: per-row weights combine along dim 0 (combine_float8)
    return Float8DynamicLinear(qdata.detach(), scale, linear.bias, granularity == "PerRow", bounds,
                               bool(getattr(config, "use_fast_accum", False)))
