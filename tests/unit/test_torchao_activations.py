"""torchao's dynamic-activation configs (builder/kernels/linear/torchao_activation.py): int8
(``Int8DynamicActivationInt8WeightConfig``) and float8 (``Float8DynamicActivationFloat8WeightConfig``,
per tensor and per row) become linears that quantize x per call and multiply with
``torch._int_mm`` / ``torch._scaled_mm``; the package holds the int8 or float8 bytes and float32
scales, never a dequantized copy. Float8 is refused for sm_80, naming the layer.

Without torchao, stand-ins of the same names and attributes; with torchao importable, its own
``quantize_`` (its float8 hardware check, which asks for a GPU of sm_89 or later, is skipped: the
build targets sm_90 and runs under the interpreter).

Tolerance (relative L2). The flattened model run eagerly equals torchao's eager output bit for
bit. The built program differs from it where Inductor keeps float32 where eager rounds to bf16
(x's scale, the SiLU's output): a scale moved by one bf16 step moves some roundings of x to int8
or float8 by one step, so the outputs differ by a part of the quantization error itself: int8
<= 2e-2, float8 <= 5e-2 (float8 e4m3 has 3 mantissa bits), and against the unquantized model in
float64 the build is within 1.25x torchao's own error.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from aotcombo.builder.kernels.linear import subclasses
from aotcombo.builder.pipeline import build_package
from aotcombo.errors import UnsupportedModelError
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

TOLERANCE = {"int8": 2e-2, "float8": 5e-2, "float8_per_row": 5e-2}
EXTERN = {"int8": "aten::_int_mm.out", "float8": "aten::_scaled_mm.out", "float8_per_row": "aten::_scaled_mm.out"}
PER_ROW, PER_TENSOR = type("PerRow", (), {"dim": -1}), type("PerTensor", (), {})


class _StandIn(torch.Tensor):
    """A torchao subclass's attributes, no ops (every op on it fails)."""

    @staticmethod
    def __new__(cls, qdata, **attributes):
        t = torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=torch.bfloat16)
        t.qdata = qdata
        for name, value in attributes.items():
            setattr(t, name, value)
        return t

    def __tensor_flatten__(self):
        return ["qdata", "scale"], {}

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{func} on the stand-in")


class Int8Tensor(_StandIn):
    pass


class Float8Tensor(_StandIn):
    pass


def _stand_in(w: torch.Tensor, config: str, **overrides) -> torch.Tensor:
    """``w`` quantized as torchao's config leaves it (a per-channel int8 or float8 scale; per tensor for float8)."""
    n, k = w.shape
    if config == "int8":
        scale = w.abs().amax(1, keepdim=True) / 127.5
        act = SimpleNamespace(granularity=PER_ROW(), mapping_type=SimpleNamespace(name="SYMMETRIC"), reduce_range=False)
        attributes = dict(scale=scale, zero_point=torch.zeros_like(scale, dtype=torch.int8), block_size=[1, k],
                          act_quant_kwargs=act)
        q = torch.clamp(torch.round(w / scale), -128, 127).to(torch.int8)
    else:
        per_row = config == "float8_per_row"
        scale = w.abs().amax(1, keepdim=True) / 448 if per_row else (w.abs().amax() / 448).reshape(1, 1)
        act = SimpleNamespace(float8_dtype=torch.float8_e4m3fn, granularity=PER_ROW() if per_row else PER_TENSOR(),
                              hp_value_lb=None, hp_value_ub=None)
        attributes = dict(scale=scale, block_size=[1, k] if per_row else [n, k], act_quant_kwargs=act,
                          mm_config=SimpleNamespace(use_fast_accum=True))
        q = (w / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    attributes.update(overrides)
    return (Int8Tensor if config == "int8" else Float8Tensor)(q, **attributes)


def _mlp(config: str, **overrides):
    """Linear(512 -> 512) -> SiLU -> Linear(512 -> 256, bias) in bf16, its linears' weights stand-ins."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512, bias=False), nn.SiLU(), nn.Linear(512, 256)).to(torch.bfloat16).eval()
    for i in (0, 2):
        w = model[i].weight.detach().float()
        w = w * (0.25 + 1.5 * torch.rand(w.shape[0], 1))  # output channels of other ranges: other scales
        model[i]._parameters["weight"] = _stand_in(w, config, **overrides)
    return model


def _built_and_run(model, rows: int, config: str, tmp_path, arch=("sm_90",)):
    result = build_package(model, (torch.randn(rows, 512, dtype=torch.bfloat16),), arch=list(arch), out=tmp_path,
                           cache=False)
    externs = [op.op for op in result.variants[0].plan.graph.ops if type(op).__name__ == "Extern"]
    assert externs == [EXTERN[config]] * 2  # one matmul per linear, of the bytes
    bytes_dtype = "int8" if config == "int8" else "float8_e4m3fn"
    assert {w.name: w.dtype for w in result.manifest.weights.tensors} == {
        "0.weight.qdata": bytes_dtype, "0.weight.scale": "float32", "2.weight.qdata": bytes_dtype,
        "2.weight.scale": "float32", "2.bias": "bfloat16"}  # the bytes and scales, no dequantized copy
    fresh = torch.randn(rows, 512, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    return fresh, interpret.run_variant(result, 0, [fresh])


@pytest.mark.parametrize("config,rows", [("int8", 32), ("int8", 1), ("float8", 4), ("float8_per_row", 32)])
def test_dynamic_activations_keep_bytes_and_scales(tmp_path, config, rows):
    """1 row: fewer than cuBLAS's _int_mm takes (more than 16), so padded with zero rows."""
    model = _mlp(config)
    fresh, got = _built_and_run(model, rows, config, tmp_path)
    assert isinstance(model[0].weight, _StandIn)  # the user's model as it was
    with torch.no_grad():
        want = subclasses.flatten(model, (90,))(fresh)
        exact = _dequantized(model)(fresh.double())
    assert relative_error(got, want) <= TOLERANCE[config]
    assert relative_error(got, exact) <= 2 * TOLERANCE[config]  # x's quantization error alone


def _dequantized(model) -> nn.Module:
    """``model`` in float64, each stand-in weight its bytes times its scale."""
    exact = nn.Sequential(nn.Linear(512, 512, bias=False), nn.SiLU(), nn.Linear(512, 256)).double()
    for i in (0, 2):
        t = model[i].weight
        exact[i].weight.data = t.qdata.double() * t.scale.double()
        if model[i].bias is not None:
            exact[i].bias.data = model[i].bias.detach().double()
    return exact


def test_float8_is_refused_for_sm_80_naming_the_layer(tmp_path):
    with pytest.raises(UnsupportedModelError, match=r"layer 0's weight is a .*Float8Tensor "
                                                    r"\(Float8DynamicActivationFloat8WeightConfig\): fp8 needs sm_89 "
                                                    r"or later, and this build is for sm_80") as raised:
        build_package(_mlp("float8"), (torch.randn(4, 512, dtype=torch.bfloat16),), arch=["sm_80", "sm_90"],
                      out=tmp_path, cache=False)
    assert "build with --arch sm_90" in raised.value.fix
    assert isinstance(subclasses.flatten(_mlp("float8"), (89, 90))[0].weight.qdata, torch.Tensor)


@pytest.mark.parametrize("config,overrides,message", [
    ("float8", {"act_quant_kwargs": None}, "of float8 weights alone"),
    ("float8", {"block_size": [1, 128]}, "with a weight scale of another layout"),
    ("int8", {"act_pre_scale": torch.ones(512)}, "with an activation pre-scale"),
])
def test_what_is_not_read_is_refused(config, overrides, message):
    with pytest.raises(UnsupportedModelError, match=f"layer 0's weight is a .*{config.title()}Tensor.* {message}"):
        subclasses.flatten(_mlp(config, **overrides), (90,))


@pytest.mark.parametrize("config,rows", [("int8", 32), ("int8", 1), ("float8", 4), ("float8_per_row", 32)])
def test_torchao_quantize_(tmp_path, monkeypatch, config, rows):
    tq = pytest.importorskip("torchao.quantization")
    from torchao.quantization import quant_api
    from torchao.quantization.granularity import PerRow

    monkeypatch.setattr(quant_api, "_check_hardware_support", lambda granularity: None)  # asks for a GPU
    torch.manual_seed(0)
    exact = nn.Sequential(nn.Linear(512, 512, bias=False), nn.SiLU(), nn.Linear(512, 256)).eval()
    model = copy.deepcopy(exact).to(torch.bfloat16)
    tq.quantize_(model, {"int8": tq.Int8DynamicActivationInt8WeightConfig(),
                         "float8": tq.Float8DynamicActivationFloat8WeightConfig(),
                         "float8_per_row": tq.Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())}[config])
    fresh, got = _built_and_run(model, rows, config, tmp_path)
    with torch.no_grad():
        want = model(fresh)  # torchao's own
        assert torch.equal(subclasses.flatten(model, (90,))(fresh), want)
        truth = exact.double()(fresh.double())
    assert relative_error(got, want) <= TOLERANCE[config]
    assert relative_error(got, truth) <= 1.25 * relative_error(want, truth)
