"""Phi decoder (transformers ``PhiModel``, 2 layers, sdpa) in bf16.

hidden 128, 8 heads of 16, partial rotary embeddings (``partial_rotary_factor`` 0.5),
attention and a GELU (tanh) MLP of 512 in parallel from one layer norm, q/k/v
projections with bias; vocab 2000, random weights. Two sequences of 33 tokens, no
padding: the causal mask only. Packaged as it is: its ``BaseModelOutputWithPast`` comes
back as a dict of ``last_hidden_state`` (``use_cache=False`` in the config).
"""

import torch


def get_model(dtype=torch.bfloat16):
    from transformers import PhiConfig, PhiModel

    torch.manual_seed(0)
    config = PhiConfig(vocab_size=2000, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                       num_attention_heads=8, partial_rotary_factor=0.5, max_position_embeddings=256,
                       use_cache=False, attn_implementation="sdpa")
    model = PhiModel(config)
    assert model.config._attn_implementation == "sdpa"
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seq=33, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2000, (batch, seq), generator=g),)
