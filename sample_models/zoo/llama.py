"""Llama decoder (transformers ``LlamaModel``, 4 layers, sdpa) in bf16.

hidden 128, 4 attention heads sharing 2 key/value heads (grouped-query
attention), SwiGLU MLP of 256, RMSNorm, rotary embeddings; vocab 1000, random
weights. Two sequences of 64 tokens, no padding: the causal mask only.

``Decoder`` returns ``last_hidden_state`` without a key/value cache.
"""

import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).last_hidden_state


def get_model(dtype=torch.bfloat16):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation="sdpa")
    model = LlamaModel(config)
    assert model.config._attn_implementation == "sdpa"
    for m in model.modules():  # RMSNorm weights start at 1: make them random too
        if type(m).__name__ == "LlamaRMSNorm":
            nn.init.normal_(m.weight, 1.0, 0.1)
    return Decoder(model).to(dtype).eval()


def get_example_inputs(batch=2, seq=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 1000, (batch, seq), generator=g),)
