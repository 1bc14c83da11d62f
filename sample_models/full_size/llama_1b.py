"""A Llama 3.2 1B (transformers ``LlamaForCausalLM`` with its config: 16 layers, hidden 2048,
32 heads sharing 8 key/value heads, SwiGLU 8192, vocab 128256, llama3 rope scaling, the LM
head tied to the embedding; 1.24B parameters) in bf16: a prompt's prefill.

One sequence of 128 tokens, the causal mask only; returns the logits, [1, 128, 128256].
Random weights (2.5 GB in bf16): built with ``--weights external``.
"""

import torch
from _wrappers import Logits


def config(dtype=torch.bfloat16):
    """Llama 3.2 1B's config (``llama_1b_decode.py`` takes it too)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        attn_implementation="sdpa", torch_dtype=dtype)


def get_model(dtype=torch.bfloat16, device="cpu"):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return Logits(LlamaForCausalLM(config(dtype))).to(dtype).to(device).eval()


def get_example_inputs(batch=1, seq=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 128256, (batch, seq), generator=g),)
