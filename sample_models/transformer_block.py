"""One GPT-2 style pre-LN transformer block (bf16).

Exercises the common LLM path: layer norms, a fused qkv projection, causal
``F.scaled_dot_product_attention`` over ``n_heads`` heads, the output
projection, a tanh-GELU MLP and two residual adds.
"""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        # nn.LayerNorm starts at weight=1, bias=0: make it random like the rest.
        for ln in (self.ln1, self.ln2):
            nn.init.normal_(ln.weight, 1.0, 0.1)
            nn.init.normal_(ln.bias, 0.0, 0.1)

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def mlp(self, x):
        return self.out(F.gelu(self.fc(x), approximate="tanh"))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def get_model(batch=4, seq=256, d_model=768, n_heads=12, dtype=torch.bfloat16):
    torch.manual_seed(0)
    return Block(d_model, n_heads).to(dtype)


def get_example_inputs(batch=4, seq=256, d_model=768, n_heads=12, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(batch, seq, d_model, generator=gen).to(dtype),)
