"""A Llama-style decoder that keeps its KV cache on the GPU: one model, prefill and decode.

4 layers, d_model 1024, 16 query heads and 4 key/value heads of 64 (grouped-query
attention), SwiGLU MLP (2816), RMSNorm, rotary position embeddings, vocab 32000, a static
KV cache of 2048 positions for up to 8 sequences, bf16, random weights (seed 0): 221 MB of
weights, 64 MB of cache.

``forward(tokens, input_pos)``: ``tokens`` is [batch, T] token ids; ``input_pos`` the cache
positions they take, either [T] (int64), the same for every sequence, or [batch, T], each
sequence its own (a server's batch of requests at different points: row i's tokens go to
positions ``input_pos[i]`` of sequence slot i, and it attends over its own positions up to
those). Each layer writes its new keys and values into its cache buffers in place
(``index_copy_`` along the position dim for [T], gpt-fast's and transformers'
``StaticCache``'s way; ``index_put_`` at (row, position) for [batch, T]), then attends over
the cache with a causal mask built from ``input_pos``, per row for [batch, T], so one build
serves every step; our attention kernel reads only the keys that mask lets a row see
(``aotcombo/builder/kernels/attention``). It returns the logits of the last position,
[batch, vocab]. Attention folds each key/value head's 4 query heads into its query rows,
so the cache is read as it is, never repeated per query head.

Two packages over one cache (``README.md``, "An LLM decode loop"): the decode step (T = 1,
a position per sequence, ``input_pos`` [batch, 1]: ``get_example_inputs``) and the prefill
(T = 128, ``input_pos`` [128]: ``get_prefill_inputs``), each with batch
buckets 1, 4, 8 and ``--weights external`` (the weights stay out of the wheels;
``load("cuda", weights=model.state_dict())`` gives them, ``load(..., state=...)`` shares
the cache)::

    aotcombo build sample_models/llm_decode.py --batch 1,4,8 --weights external --name llm_decode
    aotcombo build sample_models/llm_decode.py --inputs-fn get_prefill_inputs --batch 1,4,8 \\
        --weights external --name llm_prefill

Prompts of different lengths n_i (``aotcombo.testing.llm.generate_ragged``): prefill them
left-aligned and padded to 128 without their last token (its logits are not used; positions
past n_i - 1 hold padding until overwritten), then decode row i's last prompt token at
position n_i - 1, its first generated token at n_i, and so on: each row attends only over
its own positions, never over another row's padding.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, DIM, LAYERS, HEADS, KV_HEADS, HIDDEN = 32000, 1024, 4, 16, 4, 2816
HEAD_DIM = DIM // HEADS
GROUP = HEADS // KV_HEADS  # query heads per key/value head
MAX_BATCH, MAX_SEQ = 8, 2048
DTYPE = torch.bfloat16


@dataclass(frozen=True)
class Shape:
    """The decoder's sizes: this sample's by default (``full_size/llama_8b_batch.py``: Llama 3 8B's)."""

    vocab: int = VOCAB
    dim: int = DIM
    layers: int = LAYERS
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    hidden: int = HIDDEN
    max_batch: int = MAX_BATCH
    max_seq: int = MAX_SEQ
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


SAMPLE = Shape()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate(x, cos, sin):
    """Rotary embedding of x [b, heads, T, d] at positions whose cos/sin are [1 or b, 1, T, d/2]."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: Shape = SAMPLE):
        super().__init__()
        self.shape, heads, kv_heads, d = shape, shape.heads, shape.kv_heads, shape.head_dim
        self.wqkv = nn.Linear(shape.dim, (heads + 2 * kv_heads) * d, bias=False)
        self.wo = nn.Linear(heads * d, shape.dim, bias=False)
        cache = (shape.max_batch, kv_heads, shape.max_seq, d)
        self.register_buffer("k_cache", torch.zeros(cache, dtype=DTYPE))
        self.register_buffer("v_cache", torch.zeros(cache, dtype=DTYPE))

    def forward(self, x, cos, sin, mask, input_pos):
        b, t, _ = x.shape
        heads, kv_heads, d = self.shape.heads, self.shape.kv_heads, self.shape.head_dim
        q, k, v = self.wqkv(x).split([heads * d, kv_heads * d, kv_heads * d], dim=-1)
        q = rotate(q.view(b, t, heads, d).transpose(1, 2), cos, sin)
        k = rotate(k.view(b, t, kv_heads, d).transpose(1, 2), cos, sin)
        v = v.view(b, t, kv_heads, d).transpose(1, 2)
        k_cache, v_cache = self.k_cache[:b], self.v_cache[:b]
        if input_pos.dim() == 1:  # [T]: every row at the same positions
            k_cache.index_copy_(2, input_pos, k)
            v_cache.index_copy_(2, input_pos, v)
        else:  # [b, T]: row i at its own positions, (i, input_pos[i]) of the cache seen as [batch, pos, heads, d]
            rows = torch.arange(b, device=x.device)[:, None]  # into the whole buffer: a slice's write copies it
            self.k_cache.transpose(1, 2).index_put_((rows, input_pos), k.transpose(1, 2))
            self.v_cache.transpose(1, 2).index_put_((rows, input_pos), v.transpose(1, 2))
        # Grouped-query attention: the GROUP query heads sharing a key/value head become rows
        # of one query block, [b, KV_HEADS, GROUP * t, d], so the cache is read once, as is.
        group = self.shape.group
        folded = q.reshape(b, kv_heads, group * t, d)
        out = F.scaled_dot_product_attention(folded, k_cache, v_cache, attn_mask=mask.repeat(1, 1, group, 1))
        out = out.reshape(b, heads, t, d).transpose(1, 2).reshape(b, t, heads * d)
        return self.wo(out)


class Block(nn.Module):
    def __init__(self, shape: Shape = SAMPLE):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(shape.dim), RMSNorm(shape.dim)
        self.attention = Attention(shape)
        self.w13 = nn.Linear(shape.dim, 2 * shape.hidden, bias=False)
        self.w2 = nn.Linear(shape.hidden, shape.dim, bias=False)

    def forward(self, x, cos, sin, mask, input_pos):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos)
        gate, up = self.w13(self.ffn_norm(h)).chunk(2, dim=-1)
        return h + self.w2(F.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, shape: Shape = SAMPLE):
        super().__init__()
        self.tok_embeddings = nn.Embedding(shape.vocab, shape.dim)
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = RMSNorm(shape.dim)
        self.output = nn.Linear(shape.dim, shape.vocab, bias=False)
        d, n = shape.head_dim, shape.max_seq
        freqs = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2).float() / d))
        angles = torch.outer(torch.arange(n).float(), freqs)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.register_buffer("causal", torch.tril(torch.ones(n, n, dtype=torch.bool)), persistent=False)

    def forward(self, tokens, input_pos):
        x = self.tok_embeddings(tokens)
        pos = input_pos[None] if input_pos.dim() == 1 else input_pos  # [1 or b, T]
        cos, sin = self.rope_cos[pos][:, None], self.rope_sin[pos][:, None]  # [1 or b, 1, T, d/2]
        mask = self.causal[pos][:, None]  # [1 or b, 1, T, MAX_SEQ]: what each row's positions may see
        for layer in self.layers:
            x = layer(x, cos, sin, mask, input_pos)
        return self.output(self.norm(x[:, -1]))


def get_model():
    torch.manual_seed(0)
    model = Decoder()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:  # small enough that 4 layers keep a spread of logits
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]))
    model = model.to(DTYPE)
    model.rope_cos, model.rope_sin = model.rope_cos.float(), model.rope_sin.float()  # rotary angles stay fp32
    return model.eval()


PROMPT = 128  # the prefill package's prompt length


def get_example_inputs(batch=1, seed=0, positions=None):
    """A decode step: one token id per sequence, each at its own position (``input_pos``
    [batch, 1]; ``positions``: a list of them, by default row i at 37 i + 5, distinct)."""
    g = torch.Generator().manual_seed(seed)
    positions = [37 * i + 5 for i in range(batch)] if positions is None else positions
    return (torch.randint(0, VOCAB, (batch, 1), generator=g),
            torch.tensor(positions, dtype=torch.int64).view(batch, 1))


def get_prefill_inputs(batch=1, seed=0):
    """A prompt of ``PROMPT`` tokens per sequence at positions 0 .. PROMPT - 1 (``input_pos`` [PROMPT])."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, PROMPT), generator=g), torch.arange(PROMPT, dtype=torch.int64)
