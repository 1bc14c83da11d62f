"""Whisper-small's encoder (transformers ``WhisperEncoder`` at openai/whisper-small's config: two
convolutions over 80 log-mel bins, 12 layers, width 768, 12 heads, FFN 3072, 1500 positions; 88M
parameters) on 30 s of audio features in fp16. Two clips; random weights, built with
``--weights external``."""

import torch
from torch import nn


class Encoder(nn.Module):
    """The encoder's last hidden state, [batch, 1500, 768]."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features):
        return self.encoder(input_features=input_features).last_hidden_state


def get_model(dtype=torch.float16, device="cpu"):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(0)
    config = WhisperConfig(d_model=768, encoder_layers=12, encoder_attention_heads=12, encoder_ffn_dim=3072,
                           num_mel_bins=80, max_source_positions=1500, attn_implementation="sdpa")
    return Encoder(WhisperEncoder(config)).to(dtype).to(device).eval()


def get_example_inputs(batch=2, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 80, 3000, generator=g).to(dtype),)
