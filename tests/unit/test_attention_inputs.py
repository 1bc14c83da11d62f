"""Attention reads q, k and v through their strides (builder/trace/attention_inputs.py): a
``contiguous()`` copy only the attention reads (Whisper's) is dropped, no copy kernel is
written for it or for the output's transpose after, and the result matches eager.

Built for sm_90 and run under Triton's interpreter on fresh random inputs against eager in
float64; relative L2 <= 1e-5 (float32)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

HEADS, DIM = 4, 16


class CopiedHeads(nn.Module):
    """Self-attention over [batch, seq, HEADS * DIM] whose heads are made contiguous first, as
    Whisper's attention does (``contiguous``: False leaves the copies out, the reference)."""

    def __init__(self, contiguous: bool = True):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(HEADS * DIM, HEADS * DIM) for _ in range(3))
        self.contiguous = contiguous

    def forward(self, x):
        b, s, _ = x.shape

        def heads(t):
            t = t.view(b, s, HEADS, DIM).transpose(1, 2)
            return t.contiguous() if self.contiguous else t

        out = F.scaled_dot_product_attention(heads(self.q(x) * 0.5), heads(self.k(x)), heads(self.v(x)))
        return out.transpose(1, 2).contiguous().reshape(b, s, -1)


def _kernels(result) -> int:
    return len(result.variants[0].plan.graph.kernels)


def test_copies_only_attention_reads_are_dropped_and_it_matches_eager(tmp_path):
    seq = 160  # torch's attention, not the package's kernels (a few query rows)
    model = CopiedHeads().eval()
    inputs = [torch.randn(2, seq, HEADS * DIM)]
    result = build_package(model, inputs, arch=["sm_90"], out=tmp_path / "copied", cache=False)
    without = build_package(CopiedHeads(contiguous=False).eval(), inputs, arch=["sm_90"], out=tmp_path / "not",
                            cache=False)
    assert _kernels(result) == _kernels(without)  # no copy kernel for q, k, v or the output
    x = torch.randn(2, seq, HEADS * DIM, generator=torch.Generator().manual_seed(5))
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        ref = model.double()(x.double())
    assert relative_error(got, ref) <= 1e-5
