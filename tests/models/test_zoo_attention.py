"""Attention through the public API (runtime/ops.py), in the traced layout, as the zoo's
models call it: heads made contiguous, a low-precision additive mask, and a boolean mask
where no fused kernel applies; each with torch's attention calls and with kernels of ours,
matching eager under Triton's interpreter (tolerances: ``_zoo_helpers``)."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch import nn
from aotcombo.tools import interpret
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error

from _zoo_helpers import check


# --- attention through the public API (runtime/ops.py), in the traced layout --------------


class ContiguousHeads(nn.Module):
    """q, k, v made contiguous per head (as transformers' Whisper does), attention, and the
    heads merged back: Inductor reads the attention's result as [batch, seq, heads * dim]
    memory directly, the layout CUDA's memory-efficient kernel returns."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, 4, 16).transpose(1, 2).contiguous() for z in self.qkv(x).split(d, -1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).contiguous().reshape(b, t, d))


def _attention_by(kernels: str):
    """A build whose attention calls are torch's ("torch": builder/decode_attention.py off, as
    for calls it does not take) or kernels of ours ("ours")."""
    from aotcombo.builder.kernels.attention import lowering as decode_attention

    if kernels == "torch":
        return mock.patch.object(decode_attention, "lowering", return_value=None)
    return mock.patch.object(decode_attention, "lowering", wraps=decode_attention.lowering)


def _uses_attention(program: str, kernels: str, *needles: str) -> bool:
    if kernels == "torch":
        return "attention(" in program and "_scaled_dot" not in program and all(n in program for n in needles)
    return "attention(" not in program


@pytest.mark.parametrize("kernels", ["torch", "ours"])
def test_attention_output_has_the_fused_kernels_layout(tmp_path, kernels):
    torch.manual_seed(0)
    model = ContiguousHeads().eval()
    g = torch.Generator().manual_seed(0)
    with _attention_by(kernels):
        result = build_package(model, (torch.randn(2, 32, 64, generator=g),), arch=["sm_90"], out=tmp_path,
                               cache=False)
    assert _uses_attention(result.variants[0].program, kernels, "layout='bmhk'")
    x = torch.randn(2, 32, 64, generator=g)
    with torch.no_grad():
        check(interpret.run_variant(result, 0, [x]), model(x))


class AdditiveMask(nn.Module):
    """bf16 attention with an additive float mask in the model's dtype (transformers 4.x
    builds such masks from padding)."""

    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kernels", ["torch", "ours"])
def test_attention_takes_a_low_precision_additive_mask(tmp_path, kernels):
    g = torch.Generator().manual_seed(0)

    def inputs():
        q, k, v = (torch.randn(2, 4, 32, 16, generator=g).to(torch.bfloat16) for _ in range(3))
        mask = torch.zeros(2, 1, 32, 32)
        mask[1, :, :, 24:] = torch.finfo(torch.bfloat16).min  # the second sequence is padded
        return q, k, v, mask.to(torch.bfloat16)

    model = AdditiveMask()
    with _attention_by(kernels):
        result = build_package(model, inputs(), arch=["sm_90"], out=tmp_path, cache=False)
    assert _uses_attention(result.variants[0].program, kernels)
    x = inputs()
    ref = model(*[t.float() for t in x]).to(torch.bfloat16)  # fp32 attention, as the kernels compute it
    check(interpret.run_variant(result, 0, list(x)), ref)


@pytest.mark.parametrize("kv_heads, head_dim", [(1, 16), (8, 12)], ids=["one_kv_head", "head_dim_12"])
def test_boolean_mask_where_no_fused_attention_applies(kv_heads, head_dim, tmp_path):
    """Attention that no fused kernel takes (one key/value head broadcast over eight query
    heads, as Falcon's multi-query attention calls it; a head dim that is not a multiple of
    8) under a boolean mask: it was added as 0/1 instead of masking (0.64 from eager), a
    silent wrong answer. Within 1e-5 of eager (fp32)."""
    import torch.nn.functional as F

    class Masked(nn.Module):
        def forward(self, q, k, v):
            mask = torch.ones(q.shape[0], 1, q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def inputs():
        return (torch.randn(2, 8, 24, head_dim), torch.randn(2, kv_heads, 24, head_dim),
                torch.randn(2, kv_heads, 24, head_dim))

    result = build_package(Masked(), inputs(), arch=["sm_90"], out=tmp_path / "dist", cache=False)
    x = inputs()
    got = interpret.run_variant(result, 0, list(x))
    assert relative_error(got, Masked()(*x)) <= 1e-5
