"""BERT-base (transformers ``BertModel`` with bert-base-uncased's config: 12 layers, hidden 768,
12 heads, FFN 3072, vocab 30522; 110M parameters) in fp16, sdpa attention.

Eight sequences of 128 tokens, every other one padded after 80: ``attention_mask`` holds
zeros, so the attention gets a padding mask. Random weights; built with ``--weights
external`` (the GPU check passes the model's own ``state_dict()`` at load).
``Encoder`` returns ``(last_hidden_state, pooler_output)``.
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


def get_model(dtype=torch.float16, device="cpu"):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(attn_implementation="sdpa"))
    return Encoder(model).to(dtype).to(device).eval()


def get_example_inputs(batch=8, seq=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 30522, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    attention_mask[1::2, seq * 5 // 8:] = 0
    return input_ids, attention_mask


def get_dynamic_axes():
    """The axes ``--dynamic batch=1:32,seq=1:512`` may vary: any batch of any length up to
    the config's 512 positions."""
    return {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
