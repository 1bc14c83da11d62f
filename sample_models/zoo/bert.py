"""BERT encoder (transformers ``BertModel``, sdpa attention) with a padding mask (fp32).

2 layers, hidden 128, 4 heads, vocab 1000, random weights. Two sequences of 32
tokens, the second padded after 20 tokens: ``attention_mask`` holds zeros, so
the attention gets a padding mask (transformers 5 hands sdpa a bool mask).

transformers returns a ``ModelOutput``; aotcombo packages tuples and dicts of
tensors, so ``Encoder`` returns ``(last_hidden_state, pooler_output)``.
"""

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


def get_model():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=512, max_position_embeddings=128, attn_implementation="sdpa")
    model = BertModel(config)
    assert model.config._attn_implementation == "sdpa"
    return Encoder(model).eval()


def get_example_inputs(batch=2, seq=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 1000, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch, 2):  # every other sequence is padded
        attention_mask[b, seq * 5 // 8:] = 0
    return input_ids, attention_mask


def get_dynamic_axes():
    """The axes ``--dynamic batch=1:8,seq=1:128`` may vary (torch.onnx.export's form)."""
    return {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
