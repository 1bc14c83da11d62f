"""Qwen2 decoder (transformers ``Qwen2Model``, 2 layers, sdpa) in fp16, left-padded.

hidden 128, 8 attention heads sharing 2 key/value heads (grouped-query
attention, head dim 16), q/k/v projections with bias, SwiGLU MLP of 384,
rotary embeddings; vocab 2000, random weights. Two sequences of 45 tokens (not a
multiple of 8: the padding mask's rows are not 16-byte aligned), the
second left-padded by 15 (as batched generation pads), so the causal mask is
combined with a padding mask.

``Decoder`` returns ``last_hidden_state`` without a key/value cache.
"""

import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def get_model(dtype=torch.float16):
    from transformers import Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=2000, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation="sdpa")
    model = Qwen2Model(config)
    assert model.config._attn_implementation == "sdpa"
    return Decoder(model).to(dtype).eval()


def get_example_inputs(batch=2, seq=45, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 2000, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch, 2):
        attention_mask[b, : seq // 3] = 0
    return input_ids, attention_mask
