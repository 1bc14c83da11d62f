"""A ResNet-style conv block with global average pooling (fp16).

Exercises a convolution (an extern call) followed by fusible epilogue work:
eval-mode BatchNorm with random running statistics and affine parameters,
ReLU, a residual add of the input and a mean over the spatial dims,
giving an output of shape ``[batch, channels]``.
"""

import torch
from torch import nn


class ConvBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            self.bn.weight.normal_(1.0, 0.1)
            self.bn.bias.normal_(0.0, 0.1)
            self.bn.running_mean.normal_(0.0, 0.1)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))) + x
        return y.mean(dim=(2, 3))


def get_model(batch=8, channels=64, size=56, dtype=torch.float16):
    torch.manual_seed(0)
    return ConvBlock(channels).to(dtype)


def get_example_inputs(batch=8, channels=64, size=56, dtype=torch.float16):
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(batch, channels, size, size, generator=gen).to(dtype),)
