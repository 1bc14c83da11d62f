"""Whisper speech encoder (transformers ``WhisperEncoder``, sdpa) on log-mel features (fp32).

32 mel bins, two 1-D convolutions (the second with stride 2) and GELU, sinusoidal
positions for 64 frames after the stride, 2 transformer layers of d_model 128
with 4 heads and a 256 feed-forward; random weights. Input: [batch, 32 mel
bins, 128 frames] (Whisper needs exactly 2 x max_source_positions frames).

``Encoder`` returns ``last_hidden_state``.
"""

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_features):
        return self.model(input_features).last_hidden_state


def get_model():
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(num_mel_bins=32, d_model=128, encoder_layers=2, encoder_attention_heads=4,
                           encoder_ffn_dim=256, max_source_positions=64, attn_implementation="sdpa")
    model = WhisperEncoder(config)
    assert model.config._attn_implementation == "sdpa"
    return Encoder(model).eval()


def get_example_inputs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 32, 128, generator=g),)
