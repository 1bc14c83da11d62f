"""BART encoder-decoder (transformers ``BartModel``, 2 + 2 layers, sdpa), fp32.

d_model 128, 4 heads, FFN 256, learned positions; the decoder's self-attention is
causal and its cross-attention reads the encoder's output under the source padding
mask. vocab 2000, random weights. Two source sequences of 24 tokens (the second
padded by 6) and two target prefixes of 10 tokens: one teacher-forced forward.
Packaged as it is: its ``Seq2SeqModelOutput`` comes back as a dict of the decoder's
``last_hidden_state`` and the ``encoder_last_hidden_state`` (``use_cache=False`` in the config).
"""

import torch


def get_model(dtype=torch.float32):
    from transformers import BartConfig, BartModel

    torch.manual_seed(0)
    config = BartConfig(vocab_size=2000, d_model=128, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
                        decoder_ffn_dim=256, max_position_embeddings=128, use_cache=False,
                        attn_implementation="sdpa")
    model = BartModel(config)
    return model.to(dtype).eval()


def get_example_inputs(batch=2, source=24, target=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, 2000, (batch, source), generator=g)
    attention_mask = torch.ones(batch, source, dtype=torch.int64)
    for b in range(1, batch, 2):
        attention_mask[b, source - 6:] = 0
        input_ids[b, source - 6:] = 1  # BART's pad id
    decoder_input_ids = torch.randint(4, 2000, (batch, target), generator=g)
    decoder_input_ids[:, 0] = 2  # decoder start
    return input_ids, attention_mask, decoder_input_ids
