"""BLOOM decoder (transformers ``BloomModel``, 2 layers), bf16: ALiBi position biases.

hidden 128, 4 heads, vocab 2000, random weights; no rotary or learned positions: each
head adds a linear bias of the key distance (ALiBi) to its scores, under the causal and
padding mask (``baddbmm``). Two sequences of 32 tokens. Packaged as it is
(``use_cache=False``): a dict of ``last_hidden_state``.
"""

import torch


def get_model(dtype=torch.bfloat16):
    from transformers import BloomConfig, BloomModel

    torch.manual_seed(0)
    config = BloomConfig(vocab_size=2000, hidden_size=128, n_layer=2, n_head=4, use_cache=False)
    return BloomModel(config).to(dtype).eval()


def get_example_inputs(batch=2, seq=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 2000, (batch, seq), generator=g),)
