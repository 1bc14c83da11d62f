"""GELU (erf) in 16 bits through one exp2 (``trace/activations.py``): as near float64 as eager's own
float32 GELU, in the kernels Inductor writes for fp16 and bf16 (and only there), and the
package's output, run by the interpreter, within the dtype's rounding of eager's."""

import pytest
import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import activations, entry
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

EDGES = [0.0, -0.0, 1e-4, -1e-4, 0.5, -0.5, 3.0, -3.0, -5.66, 8.0, -9.0, 60000.0, -60000.0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_as_near_float64_as_eager(dtype):
    torch.manual_seed(0)
    x = torch.cat([torch.randn(200_000) * 3, torch.tensor(EDGES)]).to(dtype)
    exact = torch.nn.functional.gelu(x.double())
    ours = activations.gelu(x).double()
    eager = torch.nn.functional.gelu(x.float()).to(dtype).double()
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(2.0 ** -14)  # one unit in the last place, about
    assert ((ours - exact).abs() <= 1.5 * ulp).all()  # about an ulp off float64 everywhere (eager: up to 5)
    assert (ours - exact).abs().sum() <= (eager - exact).abs().sum()  # and as near as eager, overall


def test_infinities_and_nan():
    """GELU's limits: inf at inf; at -inf 0 (eager's CUDA kernel: -inf * 0, NaN); NaN stays NaN."""
    y = activations.gelu(torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=torch.float16))
    assert y[0] == float("inf") and (y[1] == 0 or y[1].isnan()) and y[2].isnan()


def test_float32_and_the_tanh_form_keep_inductors_gelu():
    assert activations.gelu(torch.randn(4), "none") is NotImplemented
    assert activations.gelu(torch.randn(4, dtype=torch.float16), "tanh") is NotImplemented


class FFN(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


def _kernel_sources(module, inputs, **options) -> str:
    graph, _, _ = entry.trace_model(module, inputs, 90, **options)
    return "\n".join(k.source for k in graph.kernels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_sixteen_bit_kernels_take_exp2_not_erf(dtype):
    module, inputs = FFN().to(dtype).eval(), (torch.randn(8, 1024, 64, dtype=dtype),)
    source = _kernel_sources(module, inputs)
    assert ("libdevice.erf" in source) == (dtype == torch.float32)
    assert ("exp2" in source) == (dtype == torch.float16)


def test_inductors_own_kernels_keep_its_gelu():
    """Counting torch.compile's launches (Inductor's combo kernels): Inductor's GELU, as it writes it."""
    module, inputs = FFN().half().eval(), (torch.randn(8, 1024, 64, dtype=torch.float16),)
    assert "libdevice.erf" in _kernel_sources(module, inputs, inductor_combo_kernels=True)


def test_package_matches_eager(tmp_path):
    torch.manual_seed(0)
    module = FFN().half().eval()
    x = torch.randn(8, 1024, 64, dtype=torch.float16) * 2
    result = build_package(module, [x], arch=["sm_90"], out=tmp_path, cache=False)
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        want = module.float()(x.float())
    assert relative_error(got.float(), want) < 2e-3  # fp16 products and GELU, float32 sums
