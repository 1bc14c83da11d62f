"""Weights held as torchao's tensor subclasses (builder/kernels/linear/subclasses.py): weight-only
int8 ones become plain int8 buffers and scales that our quantized decode kernels read; any other
subclass is refused naming it and the layer.

Without torchao a stand-in subclass of the same name and attributes is used (torchao is optional:
aotcombo never imports it); with torchao importable (``PYTHONPATH=/tmp/tao``, torchao 0.18) its
own ``quantize_`` too. Tolerance (relative L2, bf16): max(1e-2, 2 x eager's own error) against
the model in float64, as for the other fused linears.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from aotcombo.builder.kernels.linear import subclasses
from aotcombo.builder.pipeline import build_package
from aotcombo.errors import UnsupportedModelError
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret


class Int8Tensor(torch.Tensor):
    """A stand-in for torchao's: its attributes, no ops (every op on it fails)."""

    @staticmethod
    def __new__(cls, qdata, scale, act_quant_kwargs=None):
        t = torch.Tensor._make_wrapper_subclass(cls, qdata.shape, dtype=torch.bfloat16)
        t.qdata, t.scale, t.zero_point = qdata, scale, torch.zeros_like(scale, dtype=torch.int8)
        t.block_size, t.act_quant_kwargs = [1, qdata.shape[1]], act_quant_kwargs
        return t

    def __tensor_flatten__(self):
        return ["qdata", "scale", "zero_point"], {"block_size": self.block_size}

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(f"{func} on the stand-in")


class NF4Tensor(Int8Tensor):
    pass


def _mlp(weight_type=Int8Tensor, **kwargs):
    """Linear(512 -> 512) -> SiLU -> Linear(512 -> 256, bias), the linears' weights ``weight_type``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512, bias=False), nn.SiLU(), nn.Linear(512, 256)).to(torch.bfloat16)
    exact = nn.Sequential(nn.Linear(512, 512, bias=False), nn.SiLU(), nn.Linear(512, 256)).double()
    for i in (0, 2):
        w = model[i].weight.detach().float()
        scale = w.abs().amax(1, keepdim=True) / 127
        q = torch.round(w / scale).to(torch.int8)
        model[i]._parameters["weight"] = weight_type(q, scale, **kwargs)  # as quantize_ leaves it
        exact[i].weight.data = q.double() * scale.double()
        if model[i].bias is not None:
            exact[i].bias.data = model[i].bias.detach().double()
    return model.eval(), exact.eval()


def test_int8_weight_only_is_read_as_int8_bytes_and_scales(tmp_path):
    model, exact = _mlp()
    result = build_package(model, (torch.randn(1, 512, dtype=torch.bfloat16),), arch=["sm_90"], out=tmp_path,
                           cache=False)
    kernels = [s.kernel.source.splitlines()[2] for c in result.variants[0].plan.combos for s in c.subs
               if s.kernel.heuristic == "matmul"]
    assert len(kernels) == 2 and all("weight int8, scale per output channel" in k and "gemv" in k for k in kernels)
    assert {w.name: w.dtype for w in result.manifest.weights.tensors} == {
        "0.weight.qdata": "int8", "0.weight.scale": "float32", "2.weight.qdata": "int8", "2.weight.scale": "float32",
        "2.bias": "bfloat16"}
    assert isinstance(model[0].weight, Int8Tensor)  # the user's model as it was
    fresh = torch.randn(1, 512, generator=torch.Generator().manual_seed(1))
    got = interpret.run_variant(result, 0, [fresh.to(torch.bfloat16)])
    with torch.no_grad():
        want = exact(fresh.double())
        flattened = subclasses.flatten(model)(fresh.to(torch.bfloat16))
    assert relative_error(got, want) <= max(1e-2, 2 * relative_error(flattened, want))


def test_external_weights_come_from_the_quantized_model(tmp_path):
    """``--weights external``: ``aotcombo.quantized_state_dict(model)`` holds every tensor the
    package lacks, by its names, equal to those the build ran on."""
    import aotcombo

    model, _ = _mlp()
    result = build_package(model, (torch.randn(1, 512, dtype=torch.bfloat16),), arch=["sm_90"], out=tmp_path,
                           cache=False, weights="external")
    given = aotcombo.quantized_state_dict(model)
    external = {t.name for t in result.manifest.weights.tensors if t.external}
    assert external and external <= set(given)
    for t, built in zip(result.manifest.weights.tensors, result.weights):
        assert t.name not in external or torch.equal(given[t.name], built), t.name


def test_another_subclass_is_refused_naming_it_and_the_layer():
    model, _ = _mlp(NF4Tensor)
    with pytest.raises(UnsupportedModelError, match=r"layer 0's weight is a .*NF4Tensor, a tensor subclass "
                                                    r"aotcombo cannot read; aotcombo reads torchao's Int8Tensor"):
        subclasses.flatten(model)


class Int4TilePackedTo4dTensor(Int8Tensor):
    pass


def test_int4_weight_only_config_is_refused_pointing_to_the_int4_that_builds():
    model, _ = _mlp(Int4TilePackedTo4dTensor)
    with pytest.raises(UnsupportedModelError) as caught:
        subclasses.flatten(model)
    assert "Int4TilePackedTo4dTensor, a tensor subclass aotcombo cannot read" in str(caught.value)
    assert "IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128))" in caught.value.fix


def test_asymmetric_activation_quantization_is_refused():
    """Int8DynamicActivationInt8WeightConfig's symmetric activations are read
    (test_torchao_activations.py); asymmetric ones are refused, naming what is read."""
    kwargs = SimpleNamespace(granularity=SimpleNamespace(), mapping_type=SimpleNamespace(name="ASYMMETRIC"))
    model, _ = _mlp(act_quant_kwargs=kwargs)
    with pytest.raises(UnsupportedModelError, match="layer 0's weight is a .*Int8Tensor quantizing the activations "
                                                    "ASYMMETRIC SimpleNamespace; aotcombo reads SYMMETRIC"):
        subclasses.flatten(model)


def test_a_model_without_subclasses_is_not_copied():
    model = nn.Linear(4, 4)
    assert subclasses.flatten(model) is model


@pytest.mark.parametrize("config", ["int8", "intx_int4_group128"])
def test_torchao_quantize_(tmp_path, config):
    tq = pytest.importorskip("torchao.quantization")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512, bias=False), nn.SiLU(), nn.Linear(512, 256)).to(torch.bfloat16).eval()
    if config == "int8":
        tq.quantize_(model, tq.Int8WeightOnlyConfig())
    else:
        from torchao.quantization.granularity import PerGroup

        tq.quantize_(model, tq.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128)))
    result = build_package(model, (torch.randn(1, 512, dtype=torch.bfloat16),), arch=["sm_90"], out=tmp_path,
                           cache=False)
    kernels = [s.kernel.source.splitlines()[2] for c in result.variants[0].plan.combos for s in c.subs
               if s.kernel.heuristic == "matmul"]
    stored = {"int8": ("(weight int8", "int8"), "intx_int4_group128": ("(weight int4", "uint8")}[config]
    assert len(kernels) == 2 and all(stored[0] in k for k in kernels), kernels
    qdata = [w for w in result.manifest.weights.tensors if w.name.endswith("qdata")]
    assert {w.dtype for w in qdata} == {stored[1]}  # int4: two a byte, half the bytes
    assert sum(w.shape[1] for w in qdata) == 512 // (2 if stored[1] == "uint8" else 1) * 2
    fresh = torch.randn(1, 512, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got = interpret.run_variant(result, 0, [fresh])
    with torch.no_grad():
        want = model(fresh)  # torchao's own
    assert relative_error(got, want) <= 1e-2
