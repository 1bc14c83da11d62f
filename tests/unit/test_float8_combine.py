"""Float8 linears of one input become one ``_scaled_mm`` (builder/kernels/linear/combine_float8.py):
q/k/v and gate/up over torchao's per-row float8 weights (``Float8DynamicActivationFloat8WeightConfig(
granularity=PerRow())``, here test_torchao_activations' stand-ins) quantize x once and multiply once over
the concatenated bytes, scales and biases; per-tensor weights stay one call each. The combined bytes and
scales follow their parts at load (``--weights external``: the flattened model's ``state_dict``).

Tolerance: the combined program equals the uncombined one (both under the interpreter, ``_scaled_mm`` by
torch's CPU kernel) within 1e-6 relative L2: each output column is the same product.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder.kernels.linear import combine_float8, subclasses
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.state import weights_for_load
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret
from test_torchao_activations import _stand_in

D, ROWS = 256, 32
LINEARS = {"wq": (D, True), "wk": (64, True), "wv": (64, True), "wo": (D, False), "w1": (512, False),
           "w3": (512, False), "w2": (D, False)}


class Block(nn.Module):
    """q/k/v (with biases) of one normed x, an output projection, gate/up of another, down."""

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.Parameter(1 + 0.1 * torch.randn(D)), nn.Parameter(1 + 0.1 * torch.randn(D))
        for name, (n, bias) in LINEARS.items():
            setattr(self, name, nn.Linear(512 if name == "w2" else D, n, bias=bias))

    def forward(self, x):
        h = x * self.norm1
        q, k, v = self.wq(h), self.wk(h), self.wv(h)
        x = x + self.wo(q * torch.cat([k * v] * 4, -1))
        h = x * self.norm2
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def _model(config: str) -> nn.Module:
    torch.manual_seed(0)
    model = Block().to(torch.bfloat16).eval()
    for name in LINEARS:
        linear = getattr(model, name)
        w = linear.weight.detach().float() * (0.25 + 1.5 * torch.rand(linear.out_features, 1))
        linear._parameters["weight"] = _stand_in(w, config)
    return model


def _build(model, tmp_path, **options):
    result = build_package(model, (torch.randn(ROWS, D, dtype=torch.bfloat16),), arch=["sm_90"], out=tmp_path,
                           cache=False, **options)
    calls = [op for op in result.variants[0].plan.graph.ops
             if type(op).__name__ == "Extern" and op.op == "aten::_scaled_mm.out"]
    return result, len(calls)


def test_per_row_float8_linears_of_one_input_are_one_scaled_mm(tmp_path, monkeypatch):
    model = _model("float8_per_row")
    combined, calls = _build(model, tmp_path / "combined", weights="external")
    assert calls == 4  # q/k/v, o, gate/up, down
    tensors = {t.name: t for t in combined.manifest.weights.tensors}
    qkv = tensors["wq.weight.qdata|wk.weight.qdata|wv.weight.qdata"]
    assert (qkv.dtype, qkv.shape, qkv.part_rows) == ("float8_e4m3fn", (D + 128, D), (D, 64, 64))
    assert tensors["wq.weight.scale|wk.weight.scale|wv.weight.scale"].shape == (D + 128, 1)
    assert "wq.bias|wk.bias|wv.bias" in tensors and "w1.weight.qdata|w3.weight.qdata" in tensors
    assert "wq.weight.qdata" not in tensors and "wo.weight.qdata" in tensors

    flat = subclasses.flatten(model, (90,))
    weights, _ = weights_for_load(combined.manifest, {}, torch.device("cpu"), flat.state_dict())
    combined.weights[:] = weights  # what load(weights=state_dict) gives the program
    monkeypatch.setattr(combine_float8, "combine_scaled_mm", lambda ep, model, tensors: 0)
    apart, calls = _build(model, tmp_path / "apart")
    assert calls == 7
    x = torch.randn(ROWS, D, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got, want = interpret.run_variant(combined, 0, [x]), interpret.run_variant(apart, 0, [x])
    assert relative_error(got, want) <= 1e-6
    with torch.no_grad():
        assert relative_error(got, flat(x)) <= 5e-2  # torchao's eager output (test_torchao_activations)


@pytest.mark.parametrize("config", ["float8"])
def test_per_tensor_float8_linears_stay_apart(tmp_path, config):
    """A scale per weight tensor: one each, which no one ``_scaled_mm`` takes."""
    result, calls = _build(_model(config), tmp_path)
    assert calls == 7
    assert not any("|" in t.name for t in result.manifest.weights.tensors if ".weight." in t.name)
