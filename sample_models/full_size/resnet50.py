"""ResNet-50 (torchvision ``resnet50``, 1000 classes; 25.6M parameters) at 224x224 in fp16,
channels first. Eight images. Random weights with BatchNorm statistics measured on random
images (so activations keep their scale in fp16); built with ``--weights external``."""

import torch
from torch import nn


def get_model(dtype=torch.float16, device="cpu"):
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None)
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.normal_(1.0, 0.1, generator=g)
                m.bias.normal_(0.0, 0.1, generator=g)
                m.reset_running_stats()
                m.momentum = None
        model.train()
        model(torch.randn(8, 3, 224, 224, generator=g))
    return model.to(dtype).to(device).eval()


def get_example_inputs(batch=8, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 224, 224, generator=g).to(dtype),)
