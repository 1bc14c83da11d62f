"""Stable-Diffusion-style VAE decoder (diffusers ``AutoencoderKL.decode``), tiny random config (fp32).

Widths (32, 64), one layer per block, two UpDecoderBlock2D (the second with a nearest
2x upsample and 3x3 conv), a mid block with a single-head spatial self-attention over
the 8x8 latent positions, GroupNorm(8), SiLU; 4 latent channels, 3 image channels.
Input: latents [2, 4, 8, 8]; output: image [2, 3, 16, 16]. Weights rounded to 16
levels (``_weights.py``) so the wheel compresses.

``Decoder`` returns ``decode(latents).sample`` (diffusers returns a ``DecoderOutput``);
the latents are taken as they are (a pipeline divides by ``scaling_factor`` first).
"""

import torch
from torch import nn

from _weights import quantize_weights_


class Decoder(nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latents):
        return self.vae.decode(latents).sample


def get_model():
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(32, 64), layers_per_block=1,
                        latent_channels=4, norm_num_groups=8, sample_size=16)
    model = Decoder(vae).eval()
    quantize_weights_(model)
    return model


def get_example_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 4, 8, 8, generator=g),)
