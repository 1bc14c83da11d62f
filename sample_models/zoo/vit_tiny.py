"""ViT-Tiny (timm ``vit_tiny_patch16_224``) at 64x64 pixels, in bf16.

timm's ViT-Tiny (12 layers, width 192, 3 heads, patch 16, class token) built
with ``img_size=64`` (16 patches + the class token) and a 10-class head, random
weights. timm's attention calls ``F.scaled_dot_product_attention`` without a
mask (fp16/bf16 and no mask: the flash-attention path).

Size: 5.5M parameters. Every weight matrix is rounded to 16 levels (a step of
a quarter of its standard deviation), so the wheel's DEFLATE compresses the
weights about 4x; the numbers stay random and of the same scale.
"""

import torch
from _weights import quantize_weights_


def get_model(dtype=torch.bfloat16):
    import timm

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=10)
    quantize_weights_(model)
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 64, 64, generator=g).to(dtype),)
