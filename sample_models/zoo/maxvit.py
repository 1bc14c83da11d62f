"""MaxViT (torchvision ``MaxVit``, the ``maxvit_t`` design cut to two stages) at 224x224, fp32:
MBConv with squeeze-excitation, then attention inside 7x7 windows and over a 7x7 grid, each
with relative position bias. At 224 its window layer norms are tiled reductions (Inductor
splits their rows over two grid axes).

Random weights with 10 classes (rounded to 16 levels, BatchNorm statistics measured on
random images: ``_weights.py``).
"""

import torch
from _weights import calibrate_batchnorm_, quantize_weights_


def get_model(dtype=torch.float32):
    from torchvision.models import MaxVit

    torch.manual_seed(0)
    model = MaxVit(input_size=(224, 224), stem_channels=64, partition_size=7, block_channels=[64, 128],
                   block_layers=[2, 1], head_dim=32, stochastic_depth_prob=0.0, num_classes=10)
    quantize_weights_(model)
    calibrate_batchnorm_(model, size=224)
    return model.to(dtype).eval()


def get_example_inputs(batch=1, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 224, 224, generator=g).to(dtype),)
