"""A Llama-style decode step whose linears hold quantized weights (weight-only: the activations
stay bf16), dequantized in plain torch the way users hand-write it.

2 layers, d_model 512, 8 query heads and 2 key/value heads of 64 over a past of 64 positions
given as inputs, SwiGLU MLP (1536), RMSNorm, vocab 4096. ``forward(tokens, k_past, v_past)``:
``tokens`` [batch, 1], the pasts [batch, layers, kv_heads, 64, 64] bf16; returns the logits of
the step, [batch, vocab].

- ``get_model()``: int8 weights with a bf16 scale per output channel. The attention's
  projections scale the product (``F.linear(x, w.to(x.dtype)) * scale``), the MLP's and the
  head's the weight (``F.linear(x, w.to(x.dtype) * scale[:, None])``).
- ``get_int4_model()``: int4 weights, two per uint8 byte along K (the even k in the low
  nibble), a bf16 scale and zero point per group of 128 along K, unpacked with shifts and
  masks: ``(nibble - zero) * scale``.

The package holds the int8/uint8 bytes and the scales, never a dequantized copy; a decode
step's linears (up to 16 rows) are kernels of ours that dequantize in registers::

    aotcombo build sample_models/quantized_decode.py --batch 1,4,16 --name quantized_int8
    aotcombo build sample_models/quantized_decode.py --model-fn get_int4_model --batch 1,4,16 \\
        --name quantized_int4
"""

import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HIDDEN, PAST = 4096, 512, 2, 8, 2, 1536, 64
HEAD_DIM = DIM // HEADS
GROUP_SIZE = 128  # int4: one scale and zero point per 128 weights along K
DTYPE = torch.bfloat16


class Int8Linear(nn.Module):
    """Weight-only int8, symmetric, a scale per output channel. ``scale_output``: the scale
    multiplies the product instead of the weight (the same values, one multiply per output)."""

    def __init__(self, weight: torch.Tensor, scale_output: bool = False):
        super().__init__()
        scale = weight.abs().amax(1).clamp(min=1e-8) / 127
        self.register_buffer("weight", torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale.to(DTYPE))
        self.scale_output = scale_output

    def forward(self, x):
        if self.scale_output:
            return F.linear(x, self.weight.to(x.dtype)) * self.scale
        return F.linear(x, self.weight.to(x.dtype) * self.scale[:, None])


class Int4Linear(nn.Module):
    """Weight-only int4, asymmetric, a scale and zero point per group of ``GROUP_SIZE`` along
    K; weight k at byte k // 2 of its row, in the low nibble for even k."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        n, k = weight.shape
        groups = weight.float().view(n, k // GROUP_SIZE, GROUP_SIZE)
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp(min=1e-8)
        zero = torch.round(-low / scale)
        q = torch.round(groups / scale[..., None] + zero[..., None]).clamp(0, 15).to(torch.uint8).view(n, k)
        self.register_buffer("weight", q[:, 0::2] | (q[:, 1::2] << 4))
        self.register_buffer("scale", scale.to(DTYPE))
        self.register_buffer("zero", zero.to(DTYPE))

    def forward(self, x):
        low, high = self.weight & 0xF, self.weight >> 4
        q = torch.stack([low, high], dim=-1).view(self.weight.shape[0], -1)  # [N, K]
        n, k = q.shape
        w = (q.to(x.dtype).view(n, k // GROUP_SIZE, GROUP_SIZE) - self.zero[..., None]) * self.scale[..., None]
        return F.linear(x, w.view(n, k))


def quantized(weight: torch.Tensor, bits: int, scale_output: bool = False) -> nn.Module:
    """The linear of ``weight`` [N, K]: int4 or int8 as above, or (``bits`` 16) a plain
    ``nn.Linear`` for torchao to quantize (``torchao_decode.py``)."""
    if bits == 16:
        linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        linear.weight.data.copy_(weight)
        return linear
    return Int4Linear(weight) if bits == 4 else Int8Linear(weight, scale_output)


def _random_weight(n: int, k: int) -> torch.Tensor:
    return torch.randn(n, k) / math.sqrt(k)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Block(nn.Module):
    def __init__(self, bits: int):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(DIM), RMSNorm(DIM)
        # the attention's projections scale their products; the MLP's, their weights
        self.wq, self.wk, self.wv, self.wo = (quantized(_random_weight(n, DIM), bits, scale_output=True) for n in (
            HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, DIM))
        self.w1, self.w3 = quantized(_random_weight(HIDDEN, DIM), bits), quantized(_random_weight(HIDDEN, DIM), bits)
        self.w2 = quantized(_random_weight(DIM, HIDDEN), bits)

    def forward(self, x, k_past, v_past):
        b = x.shape[0]
        h = self.attention_norm(x)
        q = self.wq(h).view(b, 1, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.wk(h).view(b, 1, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.wv(h).view(b, 1, KV_HEADS, HEAD_DIM).transpose(1, 2)
        keys, values = torch.cat([k_past, k], dim=2), torch.cat([v_past, v], dim=2)
        out = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
        x = x + self.wo(out.transpose(1, 2).reshape(b, 1, DIM))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class QuantizedDecoder(nn.Module):
    def __init__(self, bits: int):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block(bits) for _ in range(LAYERS))
        self.norm = RMSNorm(DIM)
        self.output = quantized(_random_weight(VOCAB, DIM), bits)

    def forward(self, tokens, k_past, v_past):
        x = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, k_past[:, i], v_past[:, i])
        return self.output(self.norm(x[:, -1]))


def _model(bits: int) -> nn.Module:
    torch.manual_seed(0)
    return QuantizedDecoder(bits).to(DTYPE).eval()  # the int8/uint8 buffers keep their dtype


def get_model():
    """int8 weights, a bf16 scale per output channel."""
    return _model(8)


def get_int4_model():
    """int4 weights packed two per byte, a bf16 scale and zero point per group of 128."""
    return _model(4)


def get_example_inputs(batch: int = 1, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    past = (batch, LAYERS, KV_HEADS, PAST, HEAD_DIM)
    return (torch.randint(0, VOCAB, (batch, 1), generator=g),
            torch.randn(past, generator=g).to(DTYPE), torch.randn(past, generator=g).to(DTYPE))
