"""SegFormer (transformers ``SegformerForSemanticSegmentation``, 2 stages) at 64x64, fp32.

Overlapping patch embeddings, efficient self-attention with spatial reduction (a strided
conv and a LayerNorm over keys and values), Mix-FFN (a depthwise 3x3 conv inside the MLP),
then the all-MLP decode head: per-stage linears, bilinear upsampling, concat, 1x1 conv,
BatchNorm, ReLU, 1x1 classifier. 5 classes, random weights. Packaged as it is: a dict of
``logits`` [2, 5, 16, 16]. Its 1x1 convolutions of channels-last inputs return another
layout on the CPU than the trace planned: the program copies where they differ.
"""

import torch


def get_model(dtype=torch.float32):
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    torch.manual_seed(0)
    config = SegformerConfig(num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2],
                             hidden_sizes=[32, 64],
                             patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=64, num_labels=5)
    return SegformerForSemanticSegmentation(config).to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 64, 64, generator=g).to(dtype),)
