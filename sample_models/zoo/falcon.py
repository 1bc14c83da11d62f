"""Falcon decoder (transformers ``FalconModel``, 2 layers, sdpa), fp32, multi-query attention.

hidden 128, 8 query heads sharing one key/value head (``multi_query``: the key and value
are picked from the fused projection with index lists, ``fused_qkv[..., [-2], :]``), rotary
embeddings, attention and MLP in parallel; vocab 2000, random weights. Two sequences of
24 tokens, no padding. Packaged as it is (``use_cache=False``): a dict of
``last_hidden_state``.
"""

import torch


def get_model(dtype=torch.float32):
    from transformers import FalconConfig, FalconModel

    torch.manual_seed(0)
    config = FalconConfig(vocab_size=2000, hidden_size=128, num_hidden_layers=2, num_attention_heads=8,
                          multi_query=True, use_cache=False, attn_implementation="sdpa")
    return FalconModel(config).to(dtype).eval()


def get_example_inputs(batch=2, seq=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2000, (batch, seq), generator=g),)
