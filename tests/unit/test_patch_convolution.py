"""A convolution whose stride is its kernel (a ViT's patch embedding) is a matmul over the patches
(``trace/decompositions.patch_convolution``): torch's convolution's values in 1, 2 and 3 dims, with
and without a bias (bfloat16 against float64, relative L2 <= 1e-2); left to cuDNN where patches
overlap, pad, dilate, group, are one element, or do not tile the input, and in float32 (cuDNN
takes float32 in TF32). A built ViT-style patch embedding calls no convolution and matches eager
under Triton's interpreter (float64 reference, relative L2 <= 2e-3, float16)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace.decompositions import TABLE, patch_convolution
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@pytest.mark.parametrize("x_shape, w_shape", [((2, 4, 30), (5, 4, 3)), ((2, 3, 32, 48), (8, 3, 16, 16)),
                                              ((2, 3, 12, 8), (6, 3, 4, 2)), ((1, 2, 4, 8, 8), (6, 2, 2, 4, 4))])
@pytest.mark.parametrize("bias", [True, False])
def test_patches_match_the_convolution(x_shape, w_shape, bias):
    g = torch.Generator().manual_seed(sum(x_shape))
    x, w = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in (x_shape, w_shape))
    b = torch.randn(w_shape[0], generator=g).to(torch.bfloat16) if bias else None
    stride = w_shape[2:]
    got = patch_convolution(x, w, b, stride)
    expected = CONV[len(stride)](x.double(), w.double(), b if b is None else b.double(), stride)
    assert got.dtype == torch.bfloat16 and got.shape == expected.shape
    assert relative_error(got, expected) <= 1e-2  # bfloat16 products summed in float32 (eps 2 ** -8)
    convolution = TABLE[torch.ops.aten.convolution.default]
    again = convolution(x, w, b, stride, [0] * len(stride), [1] * len(stride), False, [0], 1)
    assert torch.equal(again, got)


@pytest.mark.parametrize("x_shape, w_shape, args", [
    ((1, 3, 16, 16), (4, 3, 4, 4), (2,)),             # overlapping patches
    ((1, 3, 16, 16), (4, 3, 4, 4), (4, 1)),           # padding
    ((1, 3, 16, 16), (4, 3, 4, 4), (4, 0, 2)),        # dilation
    ((1, 4, 16, 16), (4, 2, 4, 4), (4, 0, 1, 2)),     # groups
    ((1, 3, 16, 16), (4, 3, 1, 1), (1,)),             # a 1 x 1 kernel: already a matmul on cuDNN's layout
    ((1, 3, 18, 16), (4, 3, 4, 4), (4,)),             # patches that do not tile the input
])
def test_other_convolutions_stay_cudnns(x_shape, w_shape, args):
    x, w = torch.randn(*x_shape, dtype=torch.float16), torch.randn(*w_shape, dtype=torch.float16)
    assert patch_convolution(x, w, None, *args) is NotImplemented


def test_float32_stays_cudnns():  # cuDNN convolves float32 in TF32, a matmul in float32: slower
    assert patch_convolution(torch.randn(1, 3, 16, 16), torch.randn(4, 3, 4, 4), None, 4) is NotImplemented


def test_transposed_convolution_stays_cudnns():
    convolution = TABLE[torch.ops.aten.convolution.default]
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 3, 2, 2)
    assert convolution(x, w, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1) is NotImplemented


class PatchEmbedding(nn.Module):
    """A ViT's stem: 4 x 4 patches of a 3-channel image, a class token, positions and a norm."""

    def __init__(self, dim: int = 32, image: int = 16, patch: int = 4):  # float16 after .half()
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.norm(x)


def test_patch_embedding_builds_without_a_convolution_and_matches_eager(tmp_path):
    model = PatchEmbedding().eval().half()
    result = build_package(model, [torch.randn(2, 3, 16, 16).half()], arch=["sm_90"], out=tmp_path, cache=False)
    externs = [op.op for op in result.variants[0].plan.ops if isinstance(op, g.Extern)]
    assert externs and not any("convolution" in op for op in externs), externs
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3)).half()
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        ref = model.double()(x.double())
    assert relative_error(got, ref) <= 2e-3  # float16 (eps 2 ** -11) through a matmul and a norm
