"""Swin Transformer (timm ``swin_tiny_patch4_window7_224`` architecture, thinned) at 64x64, fp32.

timm's Swin with ``img_size=64``, ``window_size=4``, width 32 and depths
(2, 2, 2, 2), heads (1, 2, 4, 8), 10 classes, random weights: patch merging,
shifted windows (roll), windowed attention with a relative position bias and
the shift mask added as a float mask to ``F.scaled_dot_product_attention``.
Weight matrices rounded to 16 levels (see vit_tiny.py).
"""

import torch


def quantize_weights_(model, levels=16):
    """Round every weight of 2+ dims to ``levels`` values (step: std / 4)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                step = float(p.float().std()) / 4 or 1.0
                half = levels // 2
                p.copy_((torch.round(p.float() / step).clamp(-half, half - 1) * step).to(p.dtype))


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
