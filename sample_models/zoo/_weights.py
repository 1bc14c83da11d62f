"""Random weights the zoo's vision models share: rounded so the wheels compress, BatchNorm
statistics measured so activations keep their scale. Imported by the model files next to it."""

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
