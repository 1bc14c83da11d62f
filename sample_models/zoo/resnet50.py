"""ResNet-50 (torchvision ``resnet50``, bottleneck blocks, 25M parameters) at 64x64, fp16.

Random weights with 100 classes. Convolution and linear weights are rounded to
16 levels (a step of a quarter of their standard deviation), so DEFLATE in the
wheel compresses them about 4x (the numbers stay random and of the same scale).
BatchNorm's affine parameters are random; its running statistics are measured
on 16 random images (train mode, cumulative average) so activations keep a
sane scale through every block in fp16; then eval mode.
"""

import torch
from torch import nn


def quantize_weights_(model, levels=16):
    """Round every weight of 2+ dims to ``levels`` values (step: std / 4)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                step = float(p.float().std()) / 4 or 1.0
                half = levels // 2
                p.copy_((torch.round(p.float() / step).clamp(-half, half - 1) * step).to(p.dtype))


def calibrate_batchnorm_(model, size=64):
    """Random BN affine parameters, running statistics of random images."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.normal_(1.0, 0.1)
                m.bias.normal_(0.0, 0.1)
                m.reset_running_stats()
                m.momentum = None  # a cumulative average
        model.train()
        model(torch.randn(16, 3, size, size, generator=g))
    return model.eval()


def get_model(dtype=torch.float16):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None, num_classes=100)
    quantize_weights_(model)
    calibrate_batchnorm_(model)
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 64, 64, generator=g).to(dtype),)
