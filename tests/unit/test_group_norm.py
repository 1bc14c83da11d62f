"""GroupNorm as each channel's statistics, then its group's (``trace/group_norm.py``): the same
output, mean and rstd as torch's kernel (float32 to rounding, 16 bits to an ulp of the output's
scale), small groups left to Inductor, the trace handing it to Inductor (not when counting
torch.compile's own kernels), and the package's output, run by the interpreter, within fp16's
rounding of eager's."""

import pytest
import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import entry, group_norm
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

aten = torch.ops.aten


@pytest.mark.parametrize("shape,groups", [((2, 320, 32, 32), 32), ((3, 64, 70, 50), 8), ((1, 12, 40000), 4),
                                          ((2, 32, 32, 32, 16), 32)])
@pytest.mark.parametrize("affine", [True, False])
def test_float32_matches_torch(shape, groups, affine):
    torch.manual_seed(0)
    n, c = shape[:2]
    x = torch.randn(shape) * 3 + 5  # a mean far from zero, as after a residual add
    w, b = (torch.randn(c), torch.randn(c)) if affine else (None, None)
    hxw = x[0, 0].numel()
    want = aten.native_group_norm(x, w, b, n, c, hxw, groups, 1e-5)
    got = group_norm.native_group_norm(x, w, b, n, c, hxw, groups, 1e-5)
    for g, e in zip(got, want):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_bits_within_an_ulp(dtype):
    torch.manual_seed(0)
    x = (torch.randn(2, 64, 64, 64) * 2 + 1).to(dtype).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(64).to(dtype), torch.randn(64).to(dtype)
    exact = aten.native_group_norm(x.double(), w.double(), b.double(), 2, 64, 4096, 16, 1e-5)[0]
    got = group_norm.native_group_norm(x, w, b, 2, 64, 4096, 16, 1e-5)[0]
    eager = aten.native_group_norm(x.float(), w.float(), b.float(), 2, 64, 4096, 16, 1e-5)[0].to(dtype)
    ulp = torch.finfo(dtype).eps * exact.abs().clamp_min(1.0)
    assert ((got.double() - exact).abs() <= ulp).all()
    assert (got.double() - exact).abs().sum() <= 1.01 * (eager.double() - exact).abs().sum()


def test_what_it_leaves_to_inductor():
    """float64, and groups Inductor reduces in one kernel (under LARGE_GROUP elements)."""
    x = torch.randn(2, 8, 64, 64, dtype=torch.float64)
    assert group_norm.native_group_norm(x, None, None, 2, 8, 4096, 4, 1e-5) is NotImplemented
    small = torch.randn(2, 64, 16, 16)
    assert group_norm.native_group_norm(small, None, None, 2, 64, 256, 32, 1e-5) is NotImplemented


class Block(nn.Module):
    """A UNet resnet block's tail: convolution, residual add, GroupNorm, SiLU, convolution."""

    def __init__(self, c=64):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
        self.norm = nn.GroupNorm(8, c)

    def forward(self, x):
        return self.conv2(nn.functional.silu(self.norm(self.conv1(x) + x)))


def test_the_trace_takes_it(monkeypatch):
    """Inductor is handed this decomposition in place of its own (and not when counting its own
    launches: torch.compile's kernels)."""
    calls = []

    def counted(*args):
        calls.append(args[0].shape)
        return group_norm.native_group_norm(*args)

    monkeypatch.setitem(group_norm.TABLE, aten.native_group_norm.default, counted)
    module, inputs = Block().half().eval(), (torch.randn(2, 64, 32, 32, dtype=torch.float16),)
    entry.trace_model(module, inputs, 90)
    assert calls == [torch.Size([2, 64, 32, 32])]
    entry.trace_model(module, inputs, 90, inductor_combo_kernels=True)
    assert len(calls) == 1


def test_package_matches_eager(tmp_path):
    torch.manual_seed(0)
    module = Block().half().eval()
    x = torch.randn(2, 64, 32, 32, dtype=torch.float16)
    result = build_package(module, [x], arch=["sm_90"], out=tmp_path, cache=False)
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        want = module.float()(x.float())
    assert relative_error(got.float(), want) < 2e-3  # fp16 products and norm, float32 sums
