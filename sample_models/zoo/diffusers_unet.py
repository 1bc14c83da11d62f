"""Stable-Diffusion-style UNet (diffusers ``UNet2DConditionModel``), tiny random config (fp32).

sample_size 16, 4 latent channels, widths (32, 64), one layer per block, down blocks
CrossAttnDownBlock2D + DownBlock2D, up blocks UpBlock2D + CrossAttnUpBlock2D (a
transformer block with self-attention, cross-attention to the text states and a GEGLU
feed-forward), cross-attention dim 32, attention_head_dim 8, GroupNorm(8). Inputs: latents
[2, 4, 16, 16], one timestep per sample (float; a 0-dim int64 timestep builds and matches
too), encoder hidden states [2, 8, 32]. diffusers reads ``attention_head_dim`` as the
number of heads: 8 heads, of 4 at width 32 (torch's math attention, which Inductor
writes as bmm + softmax kernels) and of 8 at width 64 (the mid block: an attention call).
Weights rounded to 16 levels (``_weights.py``) so the wheel compresses.

``UNet`` returns ``.sample`` (diffusers returns a ``UNet2DConditionOutput``).
"""

import torch
from torch import nn

from _weights import quantize_weights_


class UNet(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, sample, timestep, encoder_hidden_states):
        return self.model(sample, timestep, encoder_hidden_states=encoder_hidden_states).sample


def get_model():
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    model = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8)
    model = UNet(model).eval()
    quantize_weights_(model)
    return model


def get_example_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    sample = torch.randn(batch, 4, 16, 16, generator=g)
    timestep = torch.randint(0, 1000, (batch,), generator=g).float()
    encoder_hidden_states = torch.randn(batch, 8, 32, generator=g)
    return sample, timestep, encoder_hidden_states
