"""builder/kernels/linear/float8_tiles.py: a per-row float8 ``_scaled_mm`` of at most three quarters as
many 128 x 128 output tiles as an sm_90 GPU's 132 multiprocessors becomes the unit-scaled product in
float32 times the two scales (and the bias), rounded to the call's dtype: the same values (run on the
CPU, within half a bf16 step of the per-row call's, relative L2), other calls left as they are."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aotcombo.builder.kernels.linear.float8_tiles import unit_scaled
from aotcombo.testing.compare import relative_error

aten = torch.ops.aten
F8 = torch.float8_e4m3fn


def _per_row(xq, w, sa, sb):
    return torch._scaled_mm(xq, w.t(), sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)


def _per_row_bias(xq, w, sa, sb, bias):
    return torch._scaled_mm(xq, w.t(), sa, sb, bias=bias, out_dtype=torch.bfloat16, use_fast_accum=True)


def _operands(m: int, n: int, k: int, bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    xq = (torch.randn(m, k, generator=g) * 4).to(F8)
    w = (torch.randn(n, k, generator=g) * 4).to(F8)
    sa = torch.rand(m, 1, generator=g) + 0.5
    sb = torch.rand(1, n, generator=g) + 0.5
    return (xq, w, sa, sb) + ((torch.randn(n, generator=g).to(torch.bfloat16),) if bias else ())


def _scaled_mm_calls(gm) -> list:
    return [n for n in gm.graph.nodes if n.target is aten._scaled_mm.default]


@pytest.mark.parametrize("bias", [False, True])
def test_few_tiles_give_the_same_values_unit_scaled(bias):
    call_of = _per_row_bias if bias else _per_row
    gm = make_fx(call_of, tracing_mode="fake")(*_operands(64, 256, 128, bias))
    assert unit_scaled(gm.graph, 90) == 1
    gm.recompile()
    (call,) = _scaled_mm_calls(gm)
    assert call.args[2] is call.args[3] and call.args[2].target is aten.full.default  # one unit scale
    assert call.args[6] == torch.float32 and call.meta["val"].dtype == torch.float32
    fresh = _operands(64, 256, 128, bias, seed=1)
    got, want = gm(*fresh), call_of(*fresh)
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == want.shape
    assert relative_error(got, want) <= 2 ** -9


@pytest.mark.parametrize("m, n, arch", [(512, 16384, 90), (1024, 2048, 90), (64, 256, 80), (64, 256, 89)])
def test_many_tiles_and_unmeasured_arches_stay_per_row(m, n, arch):
    """512 x 16384: 512 tiles (Llama 3.2 1B's gate/up at 512 tokens); 1024 x 2048: 128 tiles, more than
    three quarters of 132 (its o at 1024 tokens, slower unit-scaled); sm_80/sm_89: not measured."""
    gm = make_fx(_per_row, tracing_mode="fake")(*_operands(m, n, 128, False))
    assert unit_scaled(gm.graph, arch) == 0
    (call,) = _scaled_mm_calls(gm)
    assert call.args[6] == torch.bfloat16


def test_scales_per_tensor_stay():
    xq, w, _, _ = _operands(64, 256, 128, False)
    one = torch.ones((), dtype=torch.float32)
    gm = make_fx(_per_row, tracing_mode="fake")(xq, w, one, one)
    assert unit_scaled(gm.graph, 90) == 0
