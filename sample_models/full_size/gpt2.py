"""GPT-2 small (transformers ``GPT2LMHeadModel`` with gpt2's config: 12 layers, n_embd 768,
12 heads, vocab 50257, 1024 positions; 124M parameters, the LM head tied to the token
embedding) in bf16.

Four sequences of 256 tokens, the causal mask only; returns the logits, [4, 256, 50257].
Random weights; built with ``--weights external``.
"""

import torch
from _wrappers import Logits


def get_model(dtype=torch.bfloat16, device="cpu"):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa"))
    return Logits(model).to(dtype).to(device).eval()


def get_example_inputs(batch=4, seq=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 50257, (batch, seq), generator=g),)
