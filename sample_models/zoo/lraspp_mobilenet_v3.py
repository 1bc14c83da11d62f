"""Semantic segmentation: torchvision ``lraspp_mobilenet_v3_large`` at 96x96, fp32, returning its dict.

A MobileNetV3-Large backbone with dilated last stages (atrous depthwise convolutions),
the LR-ASPP head (a pooled sigmoid gate, a low-level branch) and bilinear upsampling to
the input size; 21 classes, random weights (rounded to 16 levels so the wheel compresses,
BatchNorm statistics measured on random images: ``_weights.py``). ``forward`` returns
``{"out": logits}`` as torchvision does: the package gives back the same dict.
"""

import torch
from _weights import calibrate_batchnorm_, quantize_weights_


def get_model(dtype=torch.float32):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                       num_classes=21)
    quantize_weights_(model)
    calibrate_batchnorm_(model, size=96)
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 96, 96, generator=g).to(dtype),)
