"""A large linear's activation in cuBLASLt's epilogue (``kernels/linear/activation_epilogue.py``):
which activations are found (by value, however the model writes them), which linears are left
alone, and the package, run by the interpreter, against eager."""

import math

import pytest
import torch
from torch import nn

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import entry
from aotcombo.runtime import ops
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

EPILOGUE = "aten::_addmm_activation.default"
ACTIVATIONS = {
    "gelu_new": lambda u: 0.5 * u * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * torch.pow(u, 3.0)))),
    "bloom": lambda u: u * 0.5 * (1.0 + torch.tanh(0.79788456 * u * (1 + 0.044715 * u * u))),
    "tanh": lambda u: nn.functional.gelu(u, approximate="tanh"),
    "relu": torch.relu,
    "exact": nn.functional.gelu,  # no cuBLASLt epilogue: Inductor's kernel
    "silu": nn.functional.silu,
}
FOUND = {"gelu_new": True, "bloom": True, "tanh": True, "relu": False, "exact": None, "silu": None}  # use_gelu


class FFN(nn.Module):
    """An FFN too large for the fused linears of ours (2 m n k > 2^27): cuBLAS's. ``conv1d``:
    GPT-2's ``Conv1D``, ``addmm(b, x.view(-1, k), W)`` with W as [k, n]."""

    def __init__(self, act: str, d=256, h=1024, conv1d=False, bias=True):
        super().__init__()
        self.up, self.down, self.act, self.conv1d = nn.Linear(d, h, bias=bias), nn.Linear(h, d), act, conv1d
        if conv1d:
            self.w_up = nn.Parameter(self.up.weight.detach().t().contiguous())
            self.w_down = nn.Parameter(self.down.weight.detach().t().contiguous())

    def forward(self, x):
        if not self.conv1d:
            return self.down(ACTIVATIONS[self.act](self.up(x)))
        u = torch.addmm(self.up.bias, x.view(-1, x.shape[-1]), self.w_up).view(*x.shape[:-1], -1)
        a = ACTIVATIONS[self.act](u)  # viewed as rows again by the next Conv1D, as GPT-2's
        return torch.addmm(self.down.bias, a.view(-1, a.shape[-1]), self.w_down).view(*x.shape)


def _epilogues(module, inputs) -> list:
    graph, _, _ = entry.trace_model(module, inputs, 90)
    return [op for op in graph.ops if isinstance(op, g.Extern) and op.op == EPILOGUE]


@pytest.mark.parametrize("conv1d", [False, True], ids=["linear", "conv1d"])
@pytest.mark.parametrize("act", list(ACTIVATIONS))
def test_activations_found_by_value(act, conv1d):
    torch.manual_seed(0)
    module = FFN(act, conv1d=conv1d).to(torch.bfloat16).eval()
    calls = _epilogues(module, (torch.randn(4, 256, 256, dtype=torch.bfloat16),))
    want = FOUND[act]
    assert len(calls) == (want is not None)
    if calls:
        assert dict(calls[0].kwargs).get("use_gelu", False) is want


def test_left_alone():
    """No bias (the op needs one), the product used beside its activation, a linear of ours."""
    x = torch.randn(4, 256, 256)
    assert not _epilogues(FFN("tanh", bias=False).eval(), (x,))

    class Both(FFN):
        def forward(self, x):
            u = self.up(x)
            return self.down(nn.functional.gelu(u, approximate="tanh")), u

    assert not _epilogues(Both("tanh").eval(), (x,))
    small = FFN("tanh", d=64, h=256).to(torch.bfloat16).eval(), (torch.randn(8, 64, 64, dtype=torch.bfloat16),)
    graph, _, _ = entry.trace_model(*small, 90)
    externs = [op.op for op in graph.ops if isinstance(op, g.Extern)]
    assert "aotcombo::fused_linear.default" in externs and EPILOGUE not in externs  # ours, the GELU in it


def test_runtime_op_computes_the_tanh_form_on_the_cpu():
    """torch's CPU kernel of ``_addmm_activation`` takes GELU's exact form; CUDA's the tanh form."""
    torch.manual_seed(0)
    b, x, w = torch.randn(64, dtype=torch.float64), torch.randn(32, 16, dtype=torch.float64) * 3, torch.randn(
        16, 64, dtype=torch.float64)
    product = torch.addmm(b, x, w)
    assert torch.allclose(ops.addmm_activation(b, x, w, use_gelu=True),
                          nn.functional.gelu(product, approximate="tanh"), rtol=0, atol=1e-12)
    assert torch.equal(ops.addmm_activation(b, x, w), torch.relu(product))


@pytest.mark.parametrize("act,conv1d", [("gelu_new", True), ("tanh", False), ("relu", False)])
def test_package_matches_eager(tmp_path, act, conv1d):
    torch.manual_seed(0)
    module = FFN(act, conv1d=conv1d).to(torch.bfloat16).eval()
    x = torch.randn(4, 256, 256, dtype=torch.bfloat16)
    result = build_package(module, [x], arch=["sm_90"], out=tmp_path, cache=False, jobs=1)
    assert EPILOGUE in result.manifest.extern_ops and EPILOGUE in result.manifest.private_ops
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        want = module.float()(x.float())
    assert relative_error(got.float(), want) < 1e-2  # bf16 products and activation, float32 sums


def test_dynamic_rows(tmp_path):
    """A dynamic batch: the rows flattened and restored through the call's sizes."""
    torch.manual_seed(0)
    module = FFN("tanh").to(torch.bfloat16).eval()

    def make(b, s=256):
        return (torch.randn(b, s, 256, dtype=torch.bfloat16),)

    result = build_package(module, make(4), arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                           shapes=Dynamic(1, 8), make_inputs=make)
    assert EPILOGUE in result.manifest.extern_ops
    for batch in (1, 3, 8):
        x = make(batch)
        with torch.no_grad():
            want = module.float()(x[0].float())
        assert relative_error(interpret.run_variant(result, 0, list(x)).float(), want) < 1e-2
