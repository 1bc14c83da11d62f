"""The combo corpus's network models (``combo_test_models``): a squeezenet1_1 backward fragment
(``SplitLargeReductions``) and the wide-ResNet-like model of PyTorch's peak-memory test, with
their inputs and model factories."""

from __future__ import annotations

import torch
from torch import nn

from aotcombo.testing.corpora import load

Draw = load("combo_case").Draw  # the corpus loads by path (aotcombo.testing.corpora), not from sys.path


class SplitLargeReductions(nn.Module):
    """test_combo_kernel_split_large_reductions: a squeezenet1_1 backward fragment (max-pool
    offsets to indices, scatter_add into a zero buffer, two masked sums over [0, 2, 3]),
    written as a forward; ``n`` is the batch (512 in PyTorch's test)."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, getitem_54, arg33_1, arg61_1, full, arg62_1):
        import torch._inductor.inductor_prims  # noqa: F401 - registers prims._low_memory_max_pool_*

        n = self.n
        full_default = torch.ops.aten.full.default([n * 128, 3025], 0, dtype=torch.float32, device=getitem_54.device)
        view_default = torch.ops.aten.view.default(getitem_54, [n * 128, 729])
        idx = torch.ops.prims._low_memory_max_pool_offsets_to_indices.default(
            arg33_1, [3, 3], [55, 55], [2, 2], [0, 0], [1, 1])
        view_default_1 = torch.ops.aten.view.default(idx, [n * 128, 729])
        scatter_add = torch.ops.aten.scatter_add.default(full_default, 1, view_default_1, view_default)
        view_default_2 = torch.ops.aten.view.default(scatter_add, [n, 128, 55, 55])
        s0 = torch.ops.aten.slice.Tensor(view_default_2, 1, 0, 64)
        s1 = torch.ops.aten.slice.Tensor(view_default_2, 1, 64, 128)
        r0 = torch.ops.aten.sum.dim_IntList(torch.ops.aten.where.self(arg61_1, full, s1), [0, 2, 3])
        r1 = torch.ops.aten.sum.dim_IntList(torch.ops.aten.where.self(arg62_1, full, s0), [0, 2, 3])
        return r0, r1


def split_large_inputs(n):
    def make(seed):
        d = Draw(seed)
        return (d.randn(n, 128, 27, 27), d.randint(0, 9, (n, 128, 27, 27), dtype=torch.int8),
                d.mask(n, 64, 55, 55), d.randn(), d.mask(n, 64, 55, 55))
    return make


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch, mid_ch, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, mid_ch, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid_ch)
        self.conv2 = nn.Conv2d(mid_ch, mid_ch, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid_ch)
        self.conv3 = nn.Conv2d(mid_ch, mid_ch * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(mid_ch * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class WideResNetLike(nn.Module):
    """ComboKernelPeakMemoryTests._make_wide_resnet_like (blocks per layer: 3, 4, 20)."""

    def __init__(self, blocks=(3, 4, 20)):
        super().__init__()

        def make_layer(in_ch, mid_ch, n, stride=1):
            downsample = nn.Sequential(nn.Conv2d(in_ch, mid_ch * 4, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(mid_ch * 4))
            layers = [_Bottleneck(in_ch, mid_ch, stride, downsample)]
            layers += [_Bottleneck(mid_ch * 4, mid_ch) for _ in range(1, n)]
            return nn.Sequential(*layers)

        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = make_layer(64, 128, blocks[0])
        self.layer2 = make_layer(512, 256, blocks[1], stride=2)
        self.layer3 = make_layer(1024, 512, blocks[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.avgpool(x).flatten(1))


def wide_resnet(blocks=(3, 4, 20)):
    torch.manual_seed(0)
    model = WideResNetLike(blocks)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # trained-looking batch-norm statistics, so eval mode is not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.25)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()
