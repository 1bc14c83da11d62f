"""T5 encoder (transformers ``T5EncoderModel``), T5 v1.1 style, with a padding mask (fp32).

d_model 128, 2 layers, 4 heads of 32, gated-GELU feed-forward of 256, relative
position buckets (an attention bias computed from positions), RMS layer norm;
vocab 1000, random weights. Two sequences of 32 tokens, the second padded
after 24 (T5's attention adds the mask to its position bias itself; it does not
call sdpa).

``Encoder`` returns ``last_hidden_state``.
"""

import torch
from torch import nn


class Encoder(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def get_model():
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4,
                      relative_attention_num_buckets=32, feed_forward_proj="gated-gelu", dropout_rate=0.0)
    return Encoder(T5EncoderModel(config)).eval()


def get_example_inputs(batch=2, seq=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, 1000, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch, 2):
        attention_mask[b, seq * 3 // 4:] = 0
    return input_ids, attention_mask


def get_dynamic_axes():
    """The axes ``--dynamic batch=1:8,seq=1:128`` may vary (torch.onnx.export's form)."""
    return {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
