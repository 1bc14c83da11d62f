"""A causal mask the model builds from ``arange``s becomes ``is_causal`` (builder/trace/causal_masks.py):
the attention call reads no mask and the mask's kernels are gone; any other mask made of constants
(one diagonal off, a window) stays the call's. Built for sm_90 and run under Triton's interpreter
on fresh random inputs against eager in float64; relative L2 <= 1e-5 (float32)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

HEADS, DIM, SEQ = 2, 16, 160  # torch's attention at this length, not the package's kernels


class MaskedAttention(nn.Module):
    """Self-attention under a mask of key position <= query position + ``offset`` (0: causal),
    within ``window`` positions back, built from ``arange`` as transformers does; ``additive``:
    as 0 and the dtype's lowest."""

    def __init__(self, offset: int = 0, window: int | None = None, additive: bool = False):
        super().__init__()
        self.qkv = nn.Linear(HEADS * DIM, 3 * HEADS * DIM)
        self.offset, self.window, self.additive = offset, window, additive

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, HEADS, DIM).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        rows, cols = torch.arange(s, device=x.device)[:, None], torch.arange(s, device=x.device)[None, :]
        mask = cols <= rows + self.offset
        if self.window is not None:
            mask = mask & (cols > rows - self.window)
        mask = mask[None, None].expand(b, 1, s, s)
        if self.additive:
            mask = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(~mask, torch.finfo(x.dtype).min)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out.transpose(1, 2).reshape(b, s, -1)


def _attention_calls(result) -> list[dict]:
    graph = result.variants[0].plan.graph
    return [dict(op.kwargs) for op in graph.ops if isinstance(op, g.Extern) and "attention" in op.op]


def _matches_eager(model, result) -> float:
    x = torch.randn(2, SEQ, HEADS * DIM, generator=torch.Generator().manual_seed(3))
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        return relative_error(got, model.double()(x.double()))


@pytest.mark.parametrize("additive", [False, True])
def test_a_causal_mask_of_constants_becomes_is_causal(tmp_path, additive):
    model = MaskedAttention(additive=additive).eval()
    result = build_package(model, [torch.randn(2, SEQ, HEADS * DIM)], arch=["sm_90"], out=tmp_path / "c", cache=False)
    calls = _attention_calls(result)
    assert calls and all(c.get("is_causal") and c.get("attn_mask") is None for c in calls), calls
    assert _matches_eager(model, result) <= 1e-5


@pytest.mark.parametrize("offset, window", [(1, None), (0, 32)])
def test_other_masks_of_constants_stay(tmp_path, offset, window):
    model = MaskedAttention(offset=offset, window=window).eval()
    result = build_package(model, [torch.randn(2, SEQ, HEADS * DIM)], arch=["sm_90"], out=tmp_path / "o", cache=False)
    calls = _attention_calls(result)
    assert calls and not any(c.get("is_causal") for c in calls), calls
    assert _matches_eager(model, result) <= 1e-5


def test_a_mask_over_a_dynamic_batch_stays_and_its_view_is_made_per_call(tmp_path):
    """Its sizes are symbolic: the call keeps its mask. The mask, made of constants, is computed at
    load and its view over the batch at each call (``plan/at_load``: a view sized by the call's
    inputs was planned at load, and the build refused the model at its meta check)."""
    model = MaskedAttention().eval()
    result = build_package(model, [torch.randn(2, SEQ, HEADS * DIM)], arch=["sm_90"], out=tmp_path / "d",
                           shapes=Dynamic(1, 4), cache=False)
    calls = _attention_calls(result)
    assert calls and not any(c.get("is_causal") for c in calls), calls
    assert _matches_eager(model, result) <= 1e-5
