"""Attention reads q, k and v through their strides (builder/trace/attention_inputs.py): a
``contiguous()`` copy only the attention reads (Whisper's) is dropped, no copy kernel is
written for it or for the output's transpose after, and the result matches eager. A query
scaled by a power of two is handed over unscaled, the factor in the call's scale.

Built for sm_90 and run under Triton's interpreter on fresh random inputs against eager in
float64; relative L2 <= 1e-5 (float32)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder.graph import Extern
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

HEADS, DIM = 4, 16


class CopiedHeads(nn.Module):
    """Self-attention over [batch, seq, HEADS * DIM] whose heads are made contiguous first, as
    Whisper's attention does (``contiguous``: False leaves the copies out, the reference)."""

    def __init__(self, contiguous: bool = True, factor: float = 0.5):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(HEADS * DIM, HEADS * DIM) for _ in range(3))
        self.contiguous, self.factor = contiguous, factor

    def forward(self, x):
        b, s, _ = x.shape

        def heads(t):
            t = t.view(b, s, HEADS, DIM).transpose(1, 2)
            return t.contiguous() if self.contiguous else t

        out = F.scaled_dot_product_attention(heads(self.q(x) * self.factor), heads(self.k(x)), heads(self.v(x)))
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


def test_a_power_of_two_on_the_query_goes_into_the_scale(tmp_path):
    """0.5 leaves no kernel of its own (the q, k, v linears are one matmul, sliced); 0.3 (not a power of
    two: the product would round otherwise) stays a kernel. Both match eager."""
    seq, x = 160, torch.randn(2, 160, HEADS * DIM, generator=torch.Generator().manual_seed(7))
    built = {}
    for factor in (0.5, 0.3):
        torch.manual_seed(0)
        model = CopiedHeads(factor=factor).eval()
        built[factor] = build_package(model, [torch.randn(2, seq, HEADS * DIM)], arch=["sm_90"],
                                      out=tmp_path / str(factor), cache=False)
        graph = built[factor].variants[0].plan.graph
        attention = [op for op in graph.ops if isinstance(op, Extern) and "attention" in op.op]
        assert len(attention) == 1
        assert dict(attention[0].kwargs).get("scale") == (factor / DIM ** 0.5 if factor == 0.5 else None)
        with torch.no_grad():
            ref = model.double()(x.double())
        assert relative_error(interpret.run_variant(built[factor], 0, [x]), ref) <= 1e-5
    assert _kernels(built[0.3]) == _kernels(built[0.5]) + 1


def test_an_output_in_its_query_layout_builds_and_matches_eager(tmp_path):
    """In 16-bit floats torch's flash attention returns its output in the query's layout:
    ``nn.MultiheadAttention`` (``batch_first``) makes that (queries, batch, heads, dim), which the
    trace once refused ("returns a layout aotcombo does not know"). At 160 rows the call is
    torch's (the result copied into the traced layout when the backend gives another), at 10 ours;
    against eager in float32 within max(1e-2, 2 x bfloat16 eager's own error)."""
    for seq in (160, 10):
        torch.manual_seed(0)
        model = nn.TransformerEncoderLayer(HEADS * DIM, HEADS, 2 * HEADS * DIM, batch_first=True).eval()
        x = torch.randn(2, seq, HEADS * DIM, generator=torch.Generator().manual_seed(seq))
        with torch.no_grad():
            ref = model(x)
            half = model.to(torch.bfloat16)
            limit = max(1e-2, 2 * relative_error(half(x.bfloat16()), ref))
        result = build_package(half, [x.bfloat16()], arch=["sm_90"], out=tmp_path / f"s{seq}", cache=False)
        assert relative_error(interpret.run_variant(result, 0, [x.bfloat16()]), ref) <= limit


def test_an_output_in_its_query_layout_with_a_dynamic_batch(tmp_path):
    """The same layer built with ``--dynamic batch=1:4`` at 10 rows: our small attention of
    sizes given at run time writes "bmhk" or "bhmk" only, so this call stays torch's (written in
    "mbhk" strides it was off by ~0.2 relative L2); checked at batches 1 and 4."""
    from aotcombo.runtime.manifest import Dynamic

    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(HEADS * DIM, HEADS, 2 * HEADS * DIM, batch_first=True).eval()
    half = nn.TransformerEncoderLayer(HEADS * DIM, HEADS, 2 * HEADS * DIM, batch_first=True).eval()
    half.load_state_dict(model.state_dict())
    half = half.to(torch.bfloat16)
    result = build_package(half, [torch.randn(2, 10, HEADS * DIM).bfloat16()], arch=["sm_90"], out=tmp_path,
                           cache=False, shapes=Dynamic(batch=(1, 4)))
    for batch in (1, 4):
        x = torch.randn(batch, 10, HEADS * DIM, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            ref = model(x)
            limit = max(1e-2, 2 * relative_error(half(x.bfloat16()), ref))
        assert relative_error(interpret.run_variant(result, 0, [x.bfloat16()]), ref) <= limit


def test_every_order_of_an_attention_output_is_read_back_and_written():
    """``to_graph._dense_order`` names the order of any dense (batch, heads, queries, dim) view
    and ``ops.in_layout`` gives a result exactly those strides, copying only where it must."""
    from aotcombo.builder.trace.to_graph import ATTENTION_ORDERS, _dense_order
    from aotcombo.runtime.ops import in_layout

    shape = dict(zip("bhmk", (2, 3, 5, 7)))
    assert len(set(ATTENTION_ORDERS)) == 24
    for order in ATTENTION_ORDERS:
        dense = torch.randn(*(shape[d] for d in order)).permute(*(order.index(d) for d in "bhmk"))
        assert _dense_order(dense) == order
        back = in_layout(dense.contiguous(), order)
        assert back.stride() == dense.stride() and torch.equal(back, dense)
        assert in_layout(dense, order) is dense  # already so: no copy
