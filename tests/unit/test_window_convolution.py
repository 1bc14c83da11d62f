"""A 1-d convolution in 16 bits is a matmul over its windows (``trace/decompositions.
window_convolution``): torch's convolution's values with strides, padding, dilation and bias
(bfloat16 and float16 against float64, relative L2 <= 1e-2); left to cuDNN with groups, a kernel
of one element or over ``WINDOW_MAX_KERNEL``, in float32 (cuDNN takes float32 in TF32) and in 2-d.
A built Whisper-style stem (two convolutions with GELU, ending token-major) calls no convolution,
permutes its kernels once at load, not per call, and matches eager under Triton's interpreter, with
its batch fixed and dynamic."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g, kernels
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.plan.combos import make_plan
from aotcombo.builder.trace.decompositions import TABLE, WINDOW_MAX_KERNEL, window_convolution
from aotcombo.builder.trace.entry import trace_model
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

from test_at_load import weight_only_per_call


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("channels, kernel, stride, padding, dilation", [
    (80, 3, 1, 1, 1),   # Whisper's first
    (16, 3, 2, 1, 1),   # its second
    (1, 8, 5, 0, 1),    # a waveform's first (wav2vec2-style)
    (6, 4, 3, 2, 2),    # dilated, padded unevenly past the end
    (5, 2, 1, 0, 1),
])
@pytest.mark.parametrize("bias", [True, False])
def test_windows_match_the_convolution(dtype, channels, kernel, stride, padding, dilation, bias):
    gen = torch.Generator().manual_seed(channels * kernel + stride)
    x = torch.randn(2, channels, 37, generator=gen).to(dtype)
    w = torch.randn(7, channels, kernel, generator=gen).to(dtype)
    b = torch.randn(7, generator=gen).to(dtype) if bias else None
    got = window_convolution(x, w, b, stride, padding, dilation)
    expected = F.conv1d(x.double(), w.double(), None if b is None else b.double(), stride, padding, dilation)
    assert got.dtype == dtype and got.shape == expected.shape
    assert relative_error(got, expected) <= 1e-2  # 16-bit products summed in float32 (bf16 eps 2 ** -8)
    convolution = TABLE[torch.ops.aten.convolution.default]
    again = convolution(x, w, b, [stride], [padding], [dilation], False, [0], 1)
    assert torch.equal(again, got)


@pytest.mark.parametrize("x_shape, w_shape, args", [
    ((1, 4, 30), (4, 2, 3), (1, 0, 1, 2)),                      # groups
    ((1, 4, 30), (4, 4, 1), (1,)),                              # a kernel of one element
    ((1, 4, 60), (4, 4, WINDOW_MAX_KERNEL + 1), (1,)),          # windows too many times the input
    ((1, 3, 16, 16), (4, 3, 3, 3), (1,)),                       # 2-d
    ((1, 4, 30), (4, 4, 3), (1, "same")),                       # padding by name
    ((1, 4, 2), (4, 4, 3), (1,)),                               # shorter than a window
])
def test_other_convolutions_stay_cudnns(x_shape, w_shape, args):
    x, w = torch.randn(*x_shape, dtype=torch.float16), torch.randn(*w_shape, dtype=torch.float16)
    assert window_convolution(x, w, None, *args) is NotImplemented


def test_float32_stays_cudnns():  # cuDNN convolves float32 in TF32, a matmul in float32: slower
    assert window_convolution(torch.randn(1, 4, 30), torch.randn(4, 4, 3), None) is NotImplemented


class Stem(nn.Module):
    """Whisper's encoder stem, small: two convolutions with GELU over mel frames, then token-major."""

    def __init__(self, mels: int = 8, dim: int = 32):  # float16 after .half()
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)

    def forward(self, x):
        x = F.gelu(self.conv1(x))
        return F.gelu(self.conv2(x)).permute(0, 2, 1)


def test_stem_builds_without_a_convolution_and_matches_eager(tmp_path):
    model = Stem().eval().half()
    example = torch.randn(2, 8, 40).half()
    result = build_package(model, [example], arch=["sm_90"], out=tmp_path, cache=False)
    externs = [op.op for op in result.variants[0].plan.ops if isinstance(op, g.Extern)]
    assert externs and not any("convolution" in op for op in externs), externs
    lowered = kernels.lower(trace_model(model, [example], 90)[0])
    assert not weight_only_per_call(make_plan(lowered)), "the kernels' permutes run per call"
    assert weight_only_per_call(make_plan(lowered, at_load=False)), "no kernel permute to move (the count can fail)"
    x = torch.randn(2, 8, 40, generator=torch.Generator().manual_seed(3)).half()
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        ref = model.double()(x.double())
    assert relative_error(got, ref) <= 2e-3  # float16 (eps 2 ** -11) through two matmuls


def test_dynamic_batch_matches_eager(tmp_path):
    """The batch a dynamic axis: the frames padded by a cat, not ``F.pad`` (whose fake kernel would
    fix the batch to the example's: the package would answer every batch with the example's)."""
    model = Stem().eval().half()
    result = build_package(model, [torch.randn(2, 8, 40).half()], arch=["sm_90"], out=tmp_path, cache=False,
                           shapes=Dynamic(1, 8))
    for batch in (1, 3):
        x = torch.randn(batch, 8, 40, generator=torch.Generator().manual_seed(batch)).half()
        got = interpret.run_variant(result, 0, [x])
        with torch.no_grad():
            ref = model.double()(x.double())
        assert got.shape == ref.shape and relative_error(got, ref) <= 2e-3
