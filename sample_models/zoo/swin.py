"""Swin Transformer (timm ``swin_tiny_patch4_window7_224`` architecture, thinned) at 64x64, fp32.

timm's Swin with ``img_size=64``, ``window_size=4``, width 32 and depths
(2, 2, 2, 2), heads (1, 2, 4, 8), 10 classes, random weights: patch merging,
shifted windows (roll), windowed attention with a relative position bias and
the shift mask added as a float mask to ``F.scaled_dot_product_attention``.
Weight matrices rounded to 16 levels (see vit_tiny.py).
"""

import torch
from _weights import quantize_weights_


def get_model():
    import timm

    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=64, window_size=4,
                              embed_dim=32, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8), num_classes=10)
    quantize_weights_(model)
    return model.eval()


def get_example_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 64, 64, generator=g),)
