"""MobileViT-XXS (timm ``mobilevit_xxs``: inverted residuals, then transformer blocks over
unfolded 2x2 patches folded back into feature maps) at 128x128, fp32.

Random weights with 100 classes (rounded to 16 levels, BatchNorm statistics measured on
random images: ``_weights.py``).
"""

import torch
from _weights import calibrate_batchnorm_, quantize_weights_


def get_model(dtype=torch.float32):
    import timm

    torch.manual_seed(0)
    model = timm.create_model("mobilevit_xxs", pretrained=False, num_classes=100)
    quantize_weights_(model)
    calibrate_batchnorm_(model, size=128)
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 128, 128, generator=g).to(dtype),)
