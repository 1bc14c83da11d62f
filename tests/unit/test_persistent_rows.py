"""Rows of an inner reduction above 2048 and up to 8192 elements are one block each, held in
registers (``trace/capture.PERSISTENT_ROWS``): a per-row quantize's two passes over the row read
it once. Rows of 2048 or fewer, and longer ones, keep Inductor's choice.

The normalized rows are built for sm_90 and run under Triton's interpreter on fresh random
inputs against eager in float64; relative L2 <= 1e-5 (float32)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace.entry import trace_model
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret


class ScaledRows(nn.Module):
    """An RMS norm and the row's absolute maximum, as a float8 quantize after it reads it."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)

    def forward(self, x):
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return normed / normed.abs().amax(-1, keepdim=True)


def _row_heuristics(width: int) -> set[str]:
    """How the kernels that reduce whole rows reduce them (2048 rows: none split in parts)."""
    graph, _, _ = trace_model(ScaledRows(width).eval(), (torch.randn(2048, width),), 90)
    return {k.heuristic for k in graph.kernels if dict(k.numels).get("r0_") == width}


@pytest.mark.parametrize("width, heuristic", [(2048, "reduction"), (4096, "persistent_reduction"),
                                              (8192, "persistent_reduction"), (16384, "reduction")])
def test_rows_above_2048_and_up_to_8192_are_one_block(width, heuristic):
    assert _row_heuristics(width) == {heuristic}


def test_a_persistent_row_matches_eager(tmp_path):
    model = ScaledRows(4096).eval()
    result = build_package(model, [torch.randn(4, 4096)], arch=["sm_90"], out=tmp_path / "rows", cache=False)
    x = torch.randn(4, 4096, generator=torch.Generator().manual_seed(7)) * 3
    got = interpret.run_variant(result, 0, [x])
    with torch.no_grad():
        ref = model.double()(x.double())
    assert relative_error(got, ref) <= 1e-5
