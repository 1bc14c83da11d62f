"""Linears of one input become one matmul over weights concatenated at build time
(builder/linears.py), and the combined weight follows its parts at load (runtime/state.py).

Tolerance: relative L2 error <= 1e-5 against eager (fp32, under Triton's interpreter).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.state import weights_for_load
from aotcombo.tools import interpret
from aotcombo.testing.compare import relative_error


class Attention(nn.Module):
    """q/k/v of one input (with biases), an output projection of another, and a linear whose
    weight is also used elsewhere (so it stays on its own)."""

    def __init__(self, d=32):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, 16), nn.Linear(d, 16)
        self.o = nn.Linear(d, d)
        self.tied = nn.Linear(d, d, bias=False)

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        y = torch.softmax(q[..., :16] @ k.transpose(-1, -2), -1) @ v
        return self.o(torch.cat([y, y], -1)) + self.tied(x) + self.tied.weight.sum()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.manual_seed(0)
    model = Attention().eval()
    return model, build_package(model, (torch.randn(2, 8, 32),), arch=["sm_90"],
                                out=tmp_path_factory.mktemp("linears"), cache=False)


def test_linears_of_one_input_are_one_matmul(built):
    model, result = built
    names = [t.name for t in result.manifest.weights.tensors]
    assert "q.weight|k.weight|v.weight" in names and "q.bias|k.bias|v.bias" in names
    assert "tied.weight" in names and "o.weight" in names and "q.weight" not in names
    combined = next(t for t in result.manifest.weights.tensors if t.name == "q.weight|k.weight|v.weight")
    assert combined.parts == ("q.weight", "k.weight", "v.weight") and combined.part_rows == (32, 16, 16)
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x)
    assert relative_error(interpret.run_variant(result, 0, [x]), ref) <= 1e-5


def test_the_combined_weight_follows_its_parts_at_load(built):
    model, result = built
    manifest = result.manifest
    packaged = dict(zip((t.name for t in manifest.weights.tensors), result.weights))
    new_k = torch.randn(16, 32)
    weights, _ = weights_for_load(manifest, packaged, torch.device("cpu"), {"k.weight": new_k})
    combined = weights[[t.name for t in manifest.weights.tensors].index("q.weight|k.weight|v.weight")]
    assert torch.equal(combined, torch.cat([model.q.weight, new_k, model.v.weight]).detach())
    with pytest.raises(ValueError, match=r"weights\['v.weight'\]: expected float32 \[16, 32\], got float32 \[8, 32\]"):
        weights_for_load(manifest, packaged, torch.device("cpu"), {"v.weight": torch.randn(8, 32)})


def test_external_weights_name_the_parts(tmp_path):
    torch.manual_seed(0)
    model = Attention().eval()
    result = build_package(model, (torch.randn(2, 8, 32),), arch=["sm_90"], out=tmp_path, cache=False,
                           weights="external")
    manifest = result.manifest
    assert all(t.external for t in manifest.weights.tensors)
    with pytest.raises(ValueError, match=r"must give \d+ tensor\(s\) it lacks: q.weight, k.weight, v.weight"):
        weights_for_load(manifest, {}, torch.device("cpu"), {})
    weights, _ = weights_for_load(manifest, {}, torch.device("cpu"), model.state_dict())
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        ref = model(x)
    result.weights[:] = weights  # the interpreter runs with what load() would give the program
    assert relative_error(interpret.run_variant(result, 0, [x]), ref) <= 1e-5


class KeyWithoutBias(nn.Module):
    """Whisper's attention inputs: q and v with a bias, k without."""

    def __init__(self, d=32):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.q(x) * 0.5, self.k(x), self.v(x)
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


@pytest.mark.parametrize("policy", ["packaged", "external"])
def test_a_linear_without_a_bias_combines_with_zeros_for_it(tmp_path, policy):
    torch.manual_seed(0)
    model = KeyWithoutBias().eval()
    result = build_package(model, (torch.randn(2, 8, 32),), arch=["sm_90"], out=tmp_path, cache=False,
                           weights=policy)
    tensors = {t.name: t for t in result.manifest.weights.tensors}
    assert set(tensors) == {"q.weight|k.weight|v.weight", "q.bias|zeros:32|v.bias"}
    bias = tensors["q.bias|zeros:32|v.bias"]
    assert bias.parts == ("q.bias", "zeros:32", "v.bias") and bias.external == (policy == "external")
    given = {name: torch.randn(t.shape) for name, t in model.state_dict().items()}  # other weights than the build's
    packaged = {} if policy == "external" else dict(zip(tensors, result.weights))
    weights, _ = weights_for_load(result.manifest, packaged, torch.device("cpu"), given)
    assert torch.equal(weights[list(tensors).index(bias.name)], torch.cat([given["q.bias"], torch.zeros(32),
                                                                           given["v.bias"]]))
    model.load_state_dict(given)
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        ref = model(x)
    result.weights[:] = weights  # the interpreter runs with what load() would give the program
    assert relative_error(interpret.run_variant(result, 0, [x]), ref) <= 1e-5


class Residual(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.up, self.down = nn.Linear(d, 64, bias=False), nn.Linear(64, d, bias=False)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def test_a_residual_added_to_a_linear_is_the_matmuls_input(tmp_path):
    torch.manual_seed(0)
    model = Residual().eval()
    result = build_package(model, (torch.randn(2, 8, 32),), arch=["sm_90"], out=tmp_path, cache=False)
    program = result.variants[0].program
    assert "addmm_lt(" in program and "1 kernel launches, 2 extern calls" in program  # relu; the add is addmm's
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x)
    assert relative_error(interpret.run_variant(result, 0, [x]), ref) <= 1e-5
