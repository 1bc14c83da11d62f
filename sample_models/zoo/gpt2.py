"""GPT-2 decoder (transformers ``GPT2Model``, 12 layers, sdpa attention) in bf16.

12 thin layers (n_embd 128, 4 heads), vocab 1000, 128 positions, random
weights; two sequences of 64 tokens, right-padded (the second after 40 tokens),
so the attention combines the causal mask with a padding mask.

``Decoder`` returns ``last_hidden_state`` (transformers' ``ModelOutput`` is not
packaged) and no key/value cache (``use_cache=False``).
"""

import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state


def get_model(dtype=torch.bfloat16):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=128, n_layer=12, n_head=4, bos_token_id=0,
                        eos_token_id=0,
                        attn_implementation="sdpa")
    model = GPT2Model(config)
    assert model.config._attn_implementation == "sdpa"
    return Decoder(model).to(dtype).eval()


def get_example_inputs(batch=2, seq=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 1000, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch, 2):
        attention_mask[b, seq * 5 // 8:] = 0
    return input_ids, attention_mask
