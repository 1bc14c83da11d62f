"""DeBERTa-v2 encoder (transformers ``DebertaV2Model``, 2 layers, disentangled attention), fp32.

hidden 128, 4 heads, FFN 256, vocab 2000, random weights; relative positions in 32
log buckets (``position_buckets``), content-to-position and position-to-content
attention, a padding mask. Two sequences of 48 tokens, the second padded by 13.

Its ``forward`` makes tensor literals on the CPU (``torch.tensor(mid - 1).type_as(x)``,
``torch.log(torch.tensor(...))``, ``torch.sqrt(torch.tensor(d) * scale)``) and combines
them with GPU tensors: the package computes them on the GPU. Packaged as it is: the
``BaseModelOutput`` comes back as a dict of ``last_hidden_state``.
"""

import torch


def get_model(dtype=torch.float32):
    from transformers import DebertaV2Config, DebertaV2Model

    torch.manual_seed(0)
    config = DebertaV2Config(vocab_size=2000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=256, max_position_embeddings=128, relative_attention=True,
                             position_buckets=32, pos_att_type=["p2c", "c2p"], max_relative_positions=-1)
    return DebertaV2Model(config).to(dtype).eval()


def get_example_inputs(batch=2, seq=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 2000, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch, 2):
        attention_mask[b, seq - 13:] = 0
    return input_ids, attention_mask
