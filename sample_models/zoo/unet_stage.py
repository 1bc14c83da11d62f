"""One down stage of a diffusion UNet (Stable-Diffusion style), hand-written, fp32.

diffusers is not needed: the stage is written here. A sinusoidal timestep
embedding and its MLP (SiLU), then two ResNet blocks (GroupNorm(32), SiLU, 3x3
convolutions, the timestep embedding added per channel, a 1x1 shortcut where
the width changes), a spatial self-attention block (GroupNorm, q/k/v
projections over the 16x16 positions, ``F.scaled_dot_product_attention`` with
4 heads), and a stride-2 downsampling convolution. Input: latents [2, 64, 16, 16]
and one timestep per sample; widths 64 -> 128; random weights (GroupNorm affine
parameters too).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class SelfAttention(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(32, channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)

    def forward(self, x):
        b, c, hgt, wid = x.shape
        h = self.norm(x).flatten(2).transpose(1, 2)  # [b, hw, c]
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, hgt * wid, self.heads, c // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        a = self.out(a.transpose(1, 2).reshape(b, hgt * wid, c))
        return x + a.transpose(1, 2).reshape(b, c, hgt, wid)


class DownStage(nn.Module):
    def __init__(self, cin=64, cout=128, temb=256, heads=4):
        super().__init__()
        self.temb_dim = cin
        self.time_mlp = nn.Sequential(nn.Linear(cin, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.res1 = ResBlock(cin, cout, temb)
        self.attn = SelfAttention(cout, heads)
        self.res2 = ResBlock(cout, cout, temb)
        self.down = nn.Conv2d(cout, cout, 3, stride=2, padding=1)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.GroupNorm):
                    m.weight.normal_(1.0, 0.1)
                    m.bias.normal_(0.0, 0.1)

    def forward(self, x, t):
        emb = self.time_mlp(timestep_embedding(t, self.temb_dim))
        h = self.res1(x, emb)
        h = self.attn(h)
        h = self.res2(h, emb)
        return self.down(h), h  # the skip connection the up path would take


def get_model():
    torch.manual_seed(0)
    return DownStage().eval()


def get_example_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 64, 16, 16, generator=g)
    t = torch.randint(0, 1000, (batch,), generator=g).float()
    return x, t
