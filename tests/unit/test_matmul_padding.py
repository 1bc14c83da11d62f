"""Matmul padding by rule (builder/inductor.py ``_should_pad_by_rule``): Inductor pads a
matmul whose sizes tensor cores cannot take unaligned when timing says it pays; with no GPU
to time on, the build pads a 16-bit one that is compute-bound on the target. Unpadded, GPT-2's
LM head (vocab 50257) ran cuBLAS's unaligned kernel on the H100: 837 us against 174 us."""

import pytest
import torch
from torch import nn

from aotcombo.builder import graph as g
from aotcombo.builder.trace import entry as trace_entry
from aotcombo.builder.pipeline import build_package
from aotcombo.tools import interpret
from aotcombo.testing.compare import relative_error


def matmul_widths(model, x) -> list[int]:
    """The output widths of the traced program's matmul calls."""
    graph, _, _ = trace_entry.trace_model(model, (x,), 90)
    calls = [op for op in graph.ops if isinstance(op, g.Extern) and op.op.startswith(("aten::mm", "aten::addmm"))]
    return [graph.spec[op.out].shape[-1] if op.out else graph.spec[op.writes[0]].shape[-1] for op in calls]


def head(dtype, k=512):
    torch.manual_seed(0)
    return nn.Linear(k, 2001, bias=False).to(dtype).eval()  # 2001 columns: not a multiple of 8


def test_a_compute_bound_16_bit_matmul_of_odd_width_is_padded():
    assert matmul_widths(head(torch.bfloat16), torch.randn(1024, 512, dtype=torch.bfloat16)) == [2008]


@pytest.mark.parametrize("dtype, rows, k", [(torch.bfloat16, 16, 2048), (torch.float32, 1024, 512)],
                         ids=["memory_bound", "float32"])
def test_other_matmuls_are_left_as_they_are(dtype, rows, k):
    # 16 rows by an 8 MB weight: cuBLAS's (too large a weight for a fused linear), memory-bound
    assert matmul_widths(head(dtype, k), torch.randn(rows, k, dtype=dtype)) == [2001]


def test_a_padded_matmul_computes_the_same(tmp_path):
    model = head(torch.bfloat16)
    x = torch.randn(1024, 512, dtype=torch.bfloat16)
    result = build_package(model, (x,), arch=["sm_90"], out=tmp_path, cache=False)
    fresh = torch.randn(1024, 512, dtype=torch.bfloat16)
    got = interpret.run_variant(result, 0, [fresh])
    with torch.no_grad():
        ref = model(fresh)
    assert got.shape == ref.shape == (1024, 2001)
    assert relative_error(got, ref) <= 1e-2  # bf16
