"""ViT-B/16 (timm ``vit_base_patch16_224``: 12 layers, width 768, 12 heads, 1000 classes; 86M
parameters) at 224x224 in fp16. Eight images; random weights, built with ``--weights external``."""

import torch


def get_model(dtype=torch.float16, device="cpu"):
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_base_patch16_224", pretrained=False).to(dtype).to(device).eval()


def get_example_inputs(batch=8, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 224, 224, generator=g).to(dtype),)
