"""Grouped-query attention at a decode step (builder/trace/grouped_heads.py): the key/value
heads read where they are, each for its group of query heads, never copied per query head.

Each model is built for sm_90 and run under Triton's interpreter on fresh random inputs,
against eager in float64. Tolerances (relative L2): fp32 <= 1e-5; bf16 <= max(1e-2, 2 x eager
bf16's own error), as in test_decode_attention.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

HEADS, KV_HEADS, DIM, KEYS, BATCH = 8, 2, 32, 512, 2


def repeat_kv(x, group: int):
    """transformers' ``repeat_kv``: each key/value head repeated for its ``group`` query heads."""
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, group, s, d).reshape(b, kv * group, s, d)


class GroupedCache(nn.Module):
    """Query heads [b, HEADS, rows, DIM] over a cache of KV_HEADS heads, each row's mask the
    positions up to its own (``input_pos`` [b, rows]): shared by every head ([b, 1, rows, keys]),
    or one per head ([b, HEADS, rows, keys], head h seeing ``h`` positions fewer). ``form``: the
    repeat as transformers writes it, or ``enable_gqa``."""

    def __init__(self, form="repeat_kv", per_head_mask=False, causal=False):
        super().__init__()
        self.form, self.per_head_mask, self.causal = form, per_head_mask, causal
        self.register_buffer("k_cache", torch.randn(BATCH, KV_HEADS, KEYS, DIM))
        self.register_buffer("v_cache", torch.randn(BATCH, KV_HEADS, KEYS, DIM))

    def forward(self, q, input_pos):
        keys = torch.arange(KEYS, device=q.device)
        mask = (keys[None, None, None, :] <= input_pos[:, None, :, None])  # [b, 1, rows, keys]
        if self.per_head_mask:
            heads = torch.arange(HEADS, device=q.device)[None, :, None, None]
            mask = keys[None, None, None, :] <= input_pos[:, None, :, None] - heads
        if self.causal:
            mask = None
        if self.form == "enable_gqa":
            return F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask, enable_gqa=True,
                                                  is_causal=self.causal)
        group = HEADS // KV_HEADS
        return F.scaled_dot_product_attention(q, repeat_kv(self.k_cache, group), repeat_kv(self.v_cache, group),
                                              attn_mask=mask, is_causal=self.causal)


def _build(model, inputs, tmp_path, dtype):
    model = model.to(dtype).eval()
    inputs = [t.to(dtype) if t.is_floating_point() else t for t in inputs]
    return model, inputs, build_package(model, inputs, arch=["sm_90"], out=tmp_path, cache=False)


def _kernels(result) -> list:
    return [s.kernel for c in result.variants[0].plan.combos for s in c.subs]


def _cache_copies(result) -> list[str]:
    """Kernels of Inductor's that write as many elements as a repeated cache holds."""
    repeated = BATCH * HEADS * KEYS * DIM
    return [k.name for k in _kernels(result) if k.heuristic != "attention"
            and any(name in ("x", "xnumel") and n >= repeated for name, n in k.numels)]


def _against_eager(model, result, inputs, dtype):
    q = torch.randn(inputs[0].shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    got = interpret.run_variant(result, 0, [q, inputs[1]])
    with torch.no_grad():
        ref = model.double()(q.double(), inputs[1])
        eager = model.to(dtype)(q, inputs[1])
    tolerance = 1e-5 if dtype == torch.float32 else max(1e-2, 2 * relative_error(eager, ref))
    assert relative_error(got, ref) <= tolerance
    return q, got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("form,per_head_mask,rows", [
    ("repeat_kv", False, 1), ("enable_gqa", False, 1), ("repeat_kv", True, 1), ("repeat_kv", False, 3),
    ("repeat_kv", True, 3),
])
def test_grouped_heads_read_the_cache_where_it_is(tmp_path, dtype, form, per_head_mask, rows):
    """Rows at positions 40 and 300 (and the next ones, rows > 1): one split and combine over
    the un-repeated cache, no kernel copying it, eager's output; then, with every key and value
    past each sequence's last position made NaN (what an unwritten cache may hold), bit for bit
    the same output (no program reads past the positions its rows may see)."""
    positions = torch.tensor([[40 + i for i in range(rows)], [300 + i for i in range(rows)]])
    model, inputs, result = _build(GroupedCache(form, per_head_mask), [torch.randn(BATCH, HEADS, rows, DIM),
                                                                       positions], tmp_path, dtype)
    names = [k.name for k in _kernels(result) if k.heuristic == "attention"]
    assert len(names) == 2 and names[0].startswith("decode_attention_split"), names
    assert not [op for op in result.variants[0].plan.ops if isinstance(op, g.Extern) and "attention" in op.op]
    assert not _cache_copies(result)
    q, clean = _against_eager(model, result, inputs, dtype)
    weight_names = [t.name for t in result.manifest.weights.tensors]
    for name in ("k_cache", "v_cache"):
        cache = result.weights[weight_names.index(name)]
        for row, last in enumerate(positions[:, -1].tolist()):
            cache[row, :, last + 1:] = float("nan")
    assert torch.equal(interpret.run_variant(result, 0, [q, positions]), clean)


def test_a_causal_grouped_call_keeps_its_repeat(tmp_path):
    """torch's ``is_causal`` counts rows from 0: folded rows would see other keys, so the
    repeat stays (a copy, and the same output as eager)."""
    rows = 4
    model, inputs, result = _build(GroupedCache("repeat_kv", causal=True), [torch.randn(BATCH, HEADS, rows, DIM),
                                                                            torch.zeros(BATCH, rows, dtype=torch.long)],
                                   tmp_path, torch.float32)
    assert _cache_copies(result)
    _against_eager(model, result, inputs, torch.float32)


def test_a_causal_grouped_prefill_of_16_bits_reads_the_heads_where_they_are(tmp_path):
    """Without a mask, 16-bit and causal, torch's flash kernel takes grouped heads itself
    (``grouped_heads.FLASH_DTYPES``): the call gets the un-repeated cache and ``enable_gqa``, no
    kernel copies it, and the output is eager's."""
    rows = 160  # a prefill: torch's attention, not the package's kernels
    model, inputs, result = _build(GroupedCache("repeat_kv", causal=True), [torch.randn(BATCH, HEADS, rows, DIM),
                                                                            torch.zeros(BATCH, rows, dtype=torch.long)],
                                   tmp_path, torch.bfloat16)
    calls = [dict(op.kwargs) for op in result.variants[0].plan.graph.ops
             if isinstance(op, g.Extern) and "attention" in op.op]
    assert calls and all(c.get("enable_gqa") and c.get("is_causal") for c in calls), calls
    assert not _cache_copies(result)
    _against_eager(model, result, inputs, torch.bfloat16)
