"""One transformers ``GPT2Block`` (layer norms, causal sdpa attention, GELU MLP), fp32.

n_embd 256, 8 heads, random weights, called on hidden states [2, 128, 256]
without a mask: the attention is causal only (``is_causal``), the path with no
mask tensor at all.

transformers 4 returns a tuple from the block, 5 a tensor; ``Block`` returns
the hidden states either way.
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, hidden_states):
        out = self.block(hidden_states)
        return out[0] if isinstance(out, tuple) else out


def get_model():
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    torch.manual_seed(0)
    config = GPT2Config(n_embd=256, n_head=8, n_positions=256, attn_implementation="sdpa")
    block = GPT2Block(config, layer_idx=0)
    for ln in (block.ln_1, block.ln_2):  # random, not the identity
        nn.init.normal_(ln.weight, 1.0, 0.1)
        nn.init.normal_(ln.bias, 0.0, 0.1)
    return Block(block).eval()


def get_example_inputs(batch=2, seq=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, seq, 256, generator=g),)
