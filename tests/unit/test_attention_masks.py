"""Boolean attention masks made additive once (builder/trace/attention_masks.py): layers that
share a padding mask and stay torch's attention read one additive mask, made where the mask is,
and match eager; calls the package's own attention kernels take keep the boolean mask.

Built for sm_90 and run under Triton's interpreter on fresh random inputs against eager in
float64; relative L2 <= 1e-5 (float32)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

HEADS, DIM, LAYERS = 4, 16, 3


class PaddedEncoder(nn.Module):
    """LAYERS self-attention layers over [batch, seq] tokens, one key-padding mask
    ([batch, 1, seq, seq], expanded from ``lengths``) read by every layer."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(HEADS * DIM, 3 * HEADS * DIM) for _ in range(LAYERS))

    def forward(self, x, lengths):
        b, s, _ = x.shape
        keys = torch.arange(s, device=x.device)
        mask = (keys[None, :] < lengths[:, None])[:, None, None, :].expand(b, 1, s, s)
        for qkv in self.qkv:
            q, k, v = qkv(x).view(b, s, 3, HEADS, DIM).permute(2, 0, 3, 1, 4)
            x = x + F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, s, -1)
        return x


def _attention_masks(result) -> list[tuple[str, str]]:
    """(dtype, the buffer it views) of each attention call's mask."""
    graph = result.variants[0].plan.graph
    views = {op.out: op.base for op in graph.ops if isinstance(op, g.View)}

    def buffer(name):
        while name in views:
            name = views[name]
        return name

    return [(graph.spec[m.name].dtype, buffer(m.name)) for m in
            (dict(op.kwargs).get("attn_mask") for op in graph.ops if isinstance(op, g.Extern) and op.op == g.ATTENTION)]


def test_layers_sharing_a_padding_mask_read_one_additive_mask(tmp_path):
    model = PaddedEncoder().eval()
    inputs = [torch.randn(2, 160, HEADS * DIM), torch.tensor([160, 57])]
    result = build_package(model, inputs, arch=["sm_90"], out=tmp_path, cache=False)
    masks = _attention_masks(result)
    assert len(masks) == LAYERS  # 160 query rows: torch's attention, not the package's kernels
    assert {dtype for dtype, _ in masks} == {"float32"}  # additive, in the query's dtype
    assert len({buffer for _, buffer in masks}) == 1  # made once
    x = torch.randn(2, 160, HEADS * DIM, generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([160, 57])
    got = interpret.run_variant(result, 0, [x, lengths])
    with torch.no_grad():
        ref = model.double()(x.double(), lengths)
    assert relative_error(got, ref) <= 1e-5
