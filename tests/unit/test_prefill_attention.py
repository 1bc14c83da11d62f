"""An unmasked prefill's attention (16-bit, head size 64, at most ``PREFILL_KEYS`` keys: ViT's,
GPT-2's causal one) as one kernel of ours (``kernels/attention/lowering.py``, "prefill"); masked,
float32, longer or other head sizes stay torch's.

Built for sm_90 and run under Triton's interpreter on fresh random inputs, against eager in
float64; float16, relative L2 <= 1e-2."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g
from aotcombo.builder.kernels.attention import lowering
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

BATCH, HEADS, SEQ, DIM = 2, 2, 160, 64  # 160 keys: past a small attention's 128; rows in 3 programs


class Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


class Causal(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Masked(nn.Module):
    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _inputs(seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(BATCH, HEADS, SEQ, DIM, generator=generator).half() for _ in range(3)]


def _attention_kernels(result) -> list[str]:
    plan = result.variants[0].plan
    return [s.kernel.name for c in plan.combos for s in c.subs if s.kernel.heuristic == "attention"]


def _torch_attention(result) -> list[str]:
    return [op.op for op in result.variants[0].plan.ops if isinstance(op, g.Extern) and "attention" in op.op]


def test_an_unmasked_prefill_is_one_kernel_of_ours_and_matches_eager(tmp_path):
    result = build_package(Attention(), _inputs(0), arch=["sm_90"], out=tmp_path, cache=False)
    kernels = _attention_kernels(result)
    assert len(kernels) == 1 and kernels[0].startswith("attention_prefill") and not _torch_attention(result)
    q, k, v = _inputs(3)
    got = interpret.run_variant(result, 0, [q, k, v])
    expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert relative_error(got, expected) <= 1e-2


def test_a_causal_prefill_reads_only_the_keys_its_rows_see_and_matches_eager(tmp_path):
    """Each program stops at its last row's key (a causal program of rows 0-63 reads one block of
    64 keys, not 160); the rows of the last program past the call's 160 read nothing more."""
    result = build_package(Causal(), _inputs(0), arch=["sm_90"], out=tmp_path, cache=False)
    kernels = _attention_kernels(result)
    assert len(kernels) == 1 and kernels[0].startswith("attention_prefill") and not _torch_attention(result)
    assert "tl.minimum(" in result.variants[0].plan.graph.kernel(kernels[0]).source
    for seed in (3, 4):
        q, k, v = _inputs(seed)
        got = interpret.run_variant(result, 0, [q, k, v])
        expected = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
        assert relative_error(got, expected) <= 1e-2


def test_a_masked_prefill_is_not_this_kernels(tmp_path):
    """A key mask is the masked prefill kernel's (test_masked_prefill.py); any other stays torch's."""
    mask = torch.rand(BATCH, 1, SEQ, SEQ) > 0.3
    result = build_package(Masked(), [*_inputs(0), mask], arch=["sm_90"], out=tmp_path, cache=False)
    assert not _attention_kernels(result) and _torch_attention(result)


def test_the_rule():
    """ViT-B/16's 197 x 197 and GPT-2's causal 256 x 256 are prefills; a mask, float32, another head
    size or more keys keep torch's attention."""
    takes = lowering.takes
    assert takes(torch.float16, (8, 12, 197, 64), 197, 1, False, None)
    assert takes(torch.bfloat16, (8, 12, 256, 64), 256, 1, False, None)
    assert not takes(torch.float16, (8, 12, 197, 64), 197, 1, False, torch.bool)
    assert not takes(torch.float32, (8, 12, 197, 64), 197, 1, False, None)
    assert not takes(torch.float16, (8, 12, 197, 40), 197, 1, False, None)
    assert takes(torch.bfloat16, (4, 12, 256, 64), 256, 1, True, None)
    assert not takes(torch.float16, (2, 12, 512, 64), 512, 1, False, None)
