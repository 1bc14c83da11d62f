"""A decode step's rotary embedding and cache write done by its attention kernel
(``kernels/attention/rope_fold.py``): which calls are folded, and the folded kernels against
eager under Triton's interpreter, output and caches, at positions across the key slices."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aotcombo.builder.kernels.attention import rope_fold
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

HEADS, KV, D, DIM = 4, 2, 16, 64


def rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., :D // 2]), -1)


class CachedAttention(nn.Module):
    """transformers' Llama attention over its ``StaticCache``, as the trace sees it: q, k and v
    from one linear, q and k rotated (``x * cos + rotate_half(x) * sin``), k and v written at
    ``pos`` by ``index_copy_``, then attention over the cache under a mask of the positions
    written, each key/value head serving two query heads. ``tokens`` > 1: a prefill."""

    def __init__(self, cache: int = 512, dtype=torch.float32):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(DIM, (HEADS + 2 * KV) * D, bias=False, dtype=dtype)
        self.out = nn.Linear(HEADS * D, DIM, bias=False, dtype=dtype)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D), persistent=False)
        self.register_buffer("k_cache", torch.randn(1, KV, cache, D, dtype=dtype))  # not zeros: unwritten garbage
        self.register_buffer("v_cache", torch.randn(1, KV, cache, D, dtype=dtype))

    def forward(self, x, pos):
        t = x.shape[1]
        q, k, v = self.qkv(x).split([HEADS * D, KV * D, KV * D], -1)
        q, k, v = (y.view(1, t, -1, D).transpose(1, 2) for y in (q, k, v))
        freqs = pos[:, None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = (f(emb).to(x.dtype)[None, None] for f in (torch.cos, torch.sin))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        mask = torch.arange(self.k_cache.shape[2], device=x.device)[None, :] <= pos[:, None]
        y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask[None, None], enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(1, t, HEADS * D))


class RowPositions(nn.Module):
    """``sample_models/llm_decode.py``'s attention (gpt-fast's): rotary angles in float32 over d/2
    pairs, each row of the batch at its own position (``index_put_`` at (row, position) of the cache
    seen as [batch, position, heads, d]), the grouped query heads folded into rows by the model, a
    cache with room for more rows than the call's."""

    def __init__(self, cache: int = 512, rows: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(DIM, (HEADS + 2 * KV) * D, bias=False)
        self.out = nn.Linear(HEADS * D, DIM, bias=False)
        angles = torch.outer(torch.arange(cache).float(), 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D))
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self.register_buffer("causal", torch.tril(torch.ones(cache, cache, dtype=torch.bool)), persistent=False)
        self.register_buffer("k_cache", torch.randn(rows, KV, cache, D))
        self.register_buffer("v_cache", torch.randn(rows, KV, cache, D))

    @staticmethod
    def rotate(x, cos, sin):
        x0, x1 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
        return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), -1).flatten(-2).type_as(x)

    def forward(self, x, pos):  # x [b, 1, DIM], pos [b, 1]
        b = x.shape[0]
        cos, sin, mask = self.rope_cos[pos][:, None], self.rope_sin[pos][:, None], self.causal[pos][:, None]
        q, k, v = self.qkv(x).split([HEADS * D, KV * D, KV * D], -1)
        q, k, v = (y.view(b, 1, -1, D).transpose(1, 2) for y in (q, k, v))
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        rows = torch.arange(b, device=x.device)[:, None]
        self.k_cache.transpose(1, 2).index_put_((rows, pos), k.transpose(1, 2))
        self.v_cache.transpose(1, 2).index_put_((rows, pos), v.transpose(1, 2))
        group = HEADS // KV
        y = F.scaled_dot_product_attention(q.reshape(b, KV, group, D), self.k_cache[:b], self.v_cache[:b],
                                           attn_mask=mask.repeat(1, 1, group, 1))
        return self.out(y.reshape(b, HEADS, 1, D).transpose(1, 2).reshape(b, 1, HEADS * D))


def test_row_positions_fold_and_match_eager(tmp_path, monkeypatch):
    """gpt-fast's form, two rows each at its own position, across the key slices: folded, and the
    output and both caches (every row, the untouched ones too) match eager (float32, rel L2 <= 1e-5)."""
    eager = RowPositions()
    g = torch.Generator().manual_seed(0)
    example = (torch.randn(2, 1, DIM, generator=g), torch.tensor([[5], [70]]))
    result, folded = _build(RowPositions(), example, tmp_path, monkeypatch)
    assert folded == 1
    _match_eager(result, eager, [(torch.randn(2, 1, DIM, generator=g), torch.tensor(rows)[:, None])
                                 for rows in [(0, 511), (63, 64), (64, 63), (300, 1)]])


def _match_eager(result, eager, steps):
    """Each step under the interpreter against eager: the output, then both caches (the package's
    state, updated in ``result.weights``), float32, relative L2 <= 1e-5."""
    names = [t.name for t in result.manifest.weights.tensors]
    for x, p in steps:
        with torch.no_grad():
            want = eager(x, p)
        got = interpret.run_variant(result, 0, [x, p])
        assert relative_error(got, want) <= 1e-5, p.tolist()
        for name in ("k_cache", "v_cache"):
            assert relative_error(result.weights[names.index(name)], eager.get_buffer(name)) <= 1e-5, (p.tolist(), name)


def _build(model, inputs, tmp_path, monkeypatch):
    folded = []
    fold = rope_fold.fold
    monkeypatch.setattr(rope_fold, "fold", lambda ep: folded.append(fold(ep)) or folded[-1])
    result = build_package(model, inputs, arch=["sm_90"], name="rope", out=tmp_path, cache=False)
    return result, sum(folded)


def _step(pos: int, seed: int, tokens: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, tokens, DIM, generator=g), torch.arange(pos, pos + tokens)


@pytest.mark.parametrize("cache", [512, 64])  # split: 8 slices of 64 keys; small: one program per head
def test_folded_decode_steps_match_eager(cache, tmp_path, monkeypatch):
    """Steps at the first and last positions of key slices (a slice writes, the others must not
    see the position) and at the cache's ends: output and both caches match eager (float32,
    relative L2 <= 1e-5); the kernel launched is the attention's alone."""
    eager = CachedAttention(cache)
    result, folded = _build(CachedAttention(cache), _step(5, 0), tmp_path, monkeypatch)
    assert folded == 1
    kernels = [k for k in result.variants[0].plan.graph.kernels if k.family == "decode_attention"]
    assert kernels and all("rope_fold" in k.source for k in kernels if "_split_" in k.name or "_small_" in k.name)
    positions = [0, 1, 63, 64, 65, 200, cache - 1] if cache > 64 else [0, 7, 63]
    _match_eager(result, eager, [_step(pos, seed + 1) for seed, pos in enumerate(positions)])


def test_a_prefill_is_not_folded(tmp_path, monkeypatch):
    """Several tokens a call: Inductor's rotary kernel and torch's attention, as before."""
    result, folded = _build(CachedAttention(64), _step(0, 0, tokens=4), tmp_path, monkeypatch)
    assert folded == 0


def test_a_cache_read_again_is_not_folded(tmp_path, monkeypatch):
    """A model that reads the written cache beyond its attention (here: returns a slice of it)
    keeps Inductor's write: the folded op's cache is written inside the kernel only."""

    class Returning(CachedAttention):
        def forward(self, x, pos):
            return super().forward(x, pos), self.k_cache[:, :, :2].clone()

    result, folded = _build(Returning(64), _step(3, 0), tmp_path, monkeypatch)
    assert folded == 0


def test_the_ops_meaning_is_the_pattern():
    """``rope_attention``'s eager meaning against the model's own ops (its reference in docs)."""
    model = CachedAttention(64)
    x, pos = _step(9, 3)
    with torch.no_grad():
        q, k, v = model.qkv(x).split([HEADS * D, KV * D, KV * D], -1)
        q, k, v = (y.view(1, 1, -1, D).transpose(1, 2) for y in (q, k, v))
        emb = torch.cat([pos[:, None].float() * model.inv_freq] * 2, -1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = (torch.arange(64) <= pos)[None, None, None]
        k_cache, v_cache = model.k_cache.clone(), model.v_cache.clone()
        got = rope_fold.rope_attention(q, k, v, cos, sin, k_cache, v_cache, pos, mask, D ** -0.5, "half")
        got = model.out(got.transpose(1, 2).reshape(1, 1, -1))
        want = model(x, pos)
    assert relative_error(got, want) <= 1e-6
    assert torch.equal(k_cache, model.k_cache) and torch.equal(v_cache, model.v_cache)
