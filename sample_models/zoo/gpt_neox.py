"""GPT-NeoX decoder (transformers ``GPTNeoXModel``, 2 layers, sdpa) in fp16, right-padded.

hidden 128, 4 heads of 32, rotary embeddings on a quarter of each head (``rotary_pct``
0.25: the rest passes through), attention and MLP in parallel from one residual
(``use_parallel_residual``), GELU MLP of 512; vocab 2000, random weights. Two
sequences of 40 tokens, the second padded at its end by 9.

Packaged as it is, without a wrapper: the inputs keep ``forward``'s names (``input_ids``,
``attention_mask``) and the ``BaseModelOutputWithPast`` comes back as a dict of its one
tensor, ``last_hidden_state`` (``use_cache=False`` in the config: no cache object).
"""

import torch


def get_model(dtype=torch.float16):
    from transformers import GPTNeoXConfig, GPTNeoXModel

    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=2000, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                           num_attention_heads=4, rotary_pct=0.25, use_parallel_residual=True,
                           max_position_embeddings=256, use_cache=False, attn_implementation="sdpa")
    model = GPTNeoXModel(config)
    assert model.config._attn_implementation == "sdpa"
    return model.to(dtype).eval()


def get_example_inputs(batch=2, seq=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 2000, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch, 2):
        attention_mask[b, seq - 9:] = 0
    return input_ids, attention_mask
