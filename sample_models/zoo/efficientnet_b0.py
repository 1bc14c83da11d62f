"""EfficientNet-B0 (torchvision ``efficientnet_b0``: MBConv blocks, depthwise convolutions,
squeeze-and-excitation, SiLU) at 64x64, fp32.

Random weights with 100 classes. Convolution and linear weights are rounded to
16 levels (a step of a quarter of their standard deviation), so DEFLATE in the
wheel compresses them about 4x (the numbers stay random and of the same scale).
BatchNorm's affine parameters are random; its running statistics are measured
on 16 random images (train mode, cumulative average) so activations keep a
sane scale through every block in fp32; then eval mode.
"""

import torch
from _weights import calibrate_batchnorm_, quantize_weights_


def get_model(dtype=torch.float32):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.efficientnet_b0(weights=None, num_classes=100)
    quantize_weights_(model)
    calibrate_batchnorm_(model)
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 64, 64, generator=g).to(dtype),)
