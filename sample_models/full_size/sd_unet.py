"""Stable Diffusion 1.5's UNet (diffusers ``UNet2DConditionModel`` at its config: widths 320, 640,
1280, 1280, two layers per block, cross-attention to 768-wide text states, 8 heads, GroupNorm(32);
860M parameters) at 64 x 64 latents (512 x 512 images), fp16. Two latents (a prompt and the
unconditioned pass of classifier-free guidance); random weights, built with ``--weights external``
from parameters on the meta device (an fp16 UNet run on two CPU cores to check the file takes
many minutes; the trace needs shapes only).
Needs diffusers (``pip install diffusers``; on the GPU machine, its wheel carried there).

``UNet`` returns ``.sample`` (diffusers returns a ``UNet2DConditionOutput``)."""

import torch
from _wrappers import default_dtype, parameters_on_meta
from torch import nn

REQUIRES = ("diffusers",)  # besides torch: tests/gpu/test_gpu_full_size.py skips the model without it


class UNet(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, sample, timestep, encoder_hidden_states):
        return self.model(sample, timestep, encoder_hidden_states=encoder_hidden_states).sample


def get_model(dtype=torch.float16, device="meta"):
    """``device="meta"``: parameters on the meta device (the build's model); another device: random
    weights made there."""
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    where = parameters_on_meta() if torch.device(device).type == "meta" else torch.device(device)
    with where, default_dtype(dtype):
        model = UNet2DConditionModel(sample_size=64, cross_attention_dim=768)
    return UNet(model).to(dtype).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    sample = torch.randn(batch, 4, 64, 64, generator=g).to(dtype)
    timestep = torch.randint(0, 1000, (batch,), generator=g).float()
    encoder_hidden_states = torch.randn(batch, 77, 768, generator=g).to(dtype)
    return sample, timestep, encoder_hidden_states
