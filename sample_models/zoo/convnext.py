"""ConvNeXt-Atto (timm ``convnext_atto``) at 64x64, fp32.

Depthwise 7x7 convolutions, channels-last LayerNorm, GELU MLPs, layer scale,
downsampling convolutions; widths 40-320, depths (2, 2, 6, 2), 10 classes,
random weights (3.4M parameters, weight matrices and kernels rounded to 16
levels so the wheel compresses; see vit_tiny.py).
"""

import torch
from _weights import quantize_weights_


def get_model():
    import timm

    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=10)
    quantize_weights_(model)
    with torch.no_grad():  # layer scale starts at 1e-6: make the blocks count
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.uniform_(0.5, 1.0)
    return model.eval()


def get_example_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 64, 64, generator=g),)
