"""Attention as kernels of ours (builder/decode_attention.py, templates/decode_attention.py.j2):
a decode step's few query rows over a long key cache, split over the keys; a small block's
attention, causal or masked, as one kernel.

Each model is built for sm_90 and run under Triton's interpreter on fresh random inputs,
against eager in float64. Tolerances (relative L2): fp32 <= 1e-5; bf16 <= max(1e-2, 2 x eager
bf16's own error), as for the zoo.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder.kernels.attention import lowering as decode_attention

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.tools import interpret
from aotcombo.testing.compare import relative_error


class CacheAttention(nn.Module):
    """Queries [b, heads, rows, dim] over a cache of ``keys`` positions held as buffers, a mask
    built from the positions (bool, or additive with -inf where a key is not yet written)."""

    def __init__(self, heads=2, dim=32, keys=512, additive=False):
        super().__init__()
        self.additive = additive
        self.register_buffer("k_cache", torch.randn(2, heads, keys, dim))
        self.register_buffer("v_cache", torch.randn(2, heads, keys, dim))

    def forward(self, q, input_pos):
        b, keys = q.shape[0], self.k_cache.shape[2]
        mask = torch.arange(keys, device=q.device)[None, :] <= input_pos[:, None]  # [rows, keys]
        if self.additive:
            mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
        return F.scaled_dot_product_attention(q, self.k_cache[:b], self.v_cache[:b], attn_mask=mask[None, None])


class SmallCausal(nn.Module):
    """Llama block's attention: q, k, v of [b, heads, seq, dim] projected from x, causal."""

    def __init__(self, d=64, heads=4):
        super().__init__()
        self.heads, self.qkv = heads, nn.Linear(d, 3 * d)

    def forward(self, x, shift):
        b, t, d = x.shape
        q, k, v = self.qkv(x + shift).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)


def _attention_kernels(result) -> list[str]:
    plan = result.variants[0].plan
    return [s.kernel.name for c in plan.combos for s in c.subs if s.kernel.heuristic == "attention"]


def _no_torch_attention(result) -> bool:
    return not [op for op in result.variants[0].plan.ops if isinstance(op, g.Extern) and "attention" in op.op]


def _check(model, inputs, tmp_path, dtype):
    model = model.to(dtype).eval()
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in inputs]
    result = build_package(model, inputs, arch=["sm_90"], out=tmp_path, cache=False)
    generator = torch.Generator().manual_seed(1)
    fresh = [torch.randn(inputs[0].shape, generator=generator).to(dtype), inputs[1]]
    got = interpret.run_variant(result, 0, fresh)
    with torch.no_grad():
        ref = model.double()(*(t.double() if t.is_floating_point() else t for t in fresh))
        eager = model.to(dtype)(*fresh)
    tolerance = 1e-5 if dtype == torch.float32 else max(1e-2, 2 * relative_error(eager, ref))
    assert relative_error(got, ref) <= tolerance
    return result


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("additive", [False, True], ids=["bool_mask", "additive_mask"])
def test_a_decode_step_attends_through_split_and_combine_kernels(tmp_path, dtype, additive):
    q = torch.randn(1, 2, 4, 32)
    input_pos = torch.tensor([300, 301, 302, 303])  # past the first splits, short of the last
    result = _check(CacheAttention(additive=additive), [q, input_pos], tmp_path, dtype)
    kernels = _attention_kernels(result)
    assert len(kernels) == 2 and kernels[0].startswith("decode_attention_split")
    assert _no_torch_attention(result)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_small_causal_block_attends_in_one_kernel(tmp_path, dtype):
    result = _check(SmallCausal(), [torch.randn(2, 40, 64), torch.randn(64)], tmp_path, dtype)  # 16 + 16 + 8 rows
    kernels = _attention_kernels(result)
    assert len(kernels) == 1 and kernels[0].startswith("attention_small")
    assert _no_torch_attention(result)


class PerRowCache(nn.Module):
    """A batched decode step whose rows sit at their own positions (sample_models/llm_decode.py
    with ``input_pos`` [batch, 1]): q [b, kv heads, group, dim] (a key/value head's query
    heads folded into rows), each row's mask the causal row of its position, [b, 1, group, keys]."""

    def __init__(self, heads=2, dim=32, keys=2048, group=4):
        super().__init__()
        self.group = group
        self.register_buffer("k_cache", torch.randn(4, heads, keys, dim))
        self.register_buffer("v_cache", torch.randn(4, heads, keys, dim))
        self.register_buffer("causal", torch.tril(torch.ones(keys, keys, dtype=torch.bool)), persistent=False)

    def forward(self, q, input_pos):
        b = q.shape[0]
        mask = self.causal[input_pos][:, None].repeat(1, 1, self.group, 1)  # input_pos [b, 1]
        return F.scaled_dot_product_attention(q, self.k_cache[:b], self.v_cache[:b], attn_mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_at_their_own_positions_read_only_the_written_keys(tmp_path, dtype):
    """Rows at positions 3, 17, 200 and 1500 of a 2048-key cache: each row's own mask, against
    eager; then with every key and value past each row's position made NaN (what an unwritten
    cache may hold), the output is bit for bit the same: no program reads past its row's
    position (reading them, even masked, would make NaN: 0 x NaN)."""
    positions = torch.tensor([[3], [17], [200], [1500]])
    model = PerRowCache()
    result = _check(model, [torch.randn(4, 2, 4, 32), positions], tmp_path, dtype)
    kernels = _attention_kernels(result)
    assert len(kernels) == 2 and kernels[0].startswith("decode_attention_split")
    assert _no_torch_attention(result)
    q = torch.randn(4, 2, 4, 32, generator=torch.Generator().manual_seed(2)).to(dtype)
    clean = interpret.run_variant(result, 0, [q, positions])
    names = [t.name for t in result.manifest.weights.tensors]
    for name in ("k_cache", "v_cache"):
        cache = result.weights[names.index(name)]
        for row, pos in enumerate(positions[:, 0].tolist()):
            cache[row, :, pos + 1:] = float("nan")
    poisoned = interpret.run_variant(result, 0, [q, positions])
    assert torch.equal(poisoned, clean)
    with torch.no_grad():
        ref = model.to(dtype).double()(q.double(), positions)
    assert relative_error(clean, ref) <= (1e-5 if dtype == torch.float32 else 1e-2)


def test_a_prefill_keeps_torchs_attention(tmp_path):
    q = torch.randn(1, 2, 64, 32)  # 64 query rows: more than MAX_ROWS
    result = build_package(CacheAttention().eval(), [q, torch.arange(64)], arch=["sm_90"], out=tmp_path, cache=False)
    assert not _attention_kernels(result)


def test_the_split_rule():
    """About TARGET_PROGRAMS programs, whole BLOCK_N steps each, every key covered once."""
    for batch_heads, keys in [(4, 2048), (32, 2048), (4, 300), (512, 4096), (1, 256), (1, 32768)]:
        splits, per_split = decode_attention.split_of(batch_heads, keys)
        assert per_split % decode_attention.BLOCK_N == 0
        assert (splits - 1) * per_split < keys <= splits * per_split
        assert splits <= decode_attention.MAX_SPLITS
        assert batch_heads * splits <= max(batch_heads, decode_attention.TARGET_PROGRAMS)
    assert decode_attention.split_of(4, 2048) == (32, 64)  # batch 1 of the LLM sample: 128 programs
    assert decode_attention.split_of(32, 2048) == (32, 64)  # batch 8: 1024
