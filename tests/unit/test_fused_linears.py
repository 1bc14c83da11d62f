"""Linears with the norm before them and the pointwise ops after them as one kernel of ours
(builder/fused_linears.py, templates/fused_linear.py.j2).

Each model is built for sm_90 and run under Triton's interpreter on fresh random inputs.
Tolerances (relative L2 against eager in float32/float64): fp32 <= 1e-5; bf16 <= max(1e-2,
2 x eager bf16's own error), as for the zoo.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from aotcombo.builder.kernels.linear import match as linear_match, recipe as kernels_linear_recipe
from aotcombo.builder.trace import entry as trace_entry

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.tools import interpret
from aotcombo.testing.compare import relative_error


class PreNormBlock(nn.Module):
    """ViT's block: LayerNorm -> qkv, attention, proj + residual, LayerNorm -> fc1 -> GELU
    (tanh form) -> fc2 + residual."""

    def __init__(self, d=64, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


class RMSNorm(nn.Module):
    """Llama's, written out with its casts."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(1 + 0.1 * torch.randn(d)), eps

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class SwiGLU(nn.Module):
    """RMSNorm -> gate/up (one matmul once combined) -> silu(gate) * up -> down + residual."""

    def __init__(self, d=64, hidden=96):
        super().__init__()
        self.norm = RMSNorm(d)
        self.gate, self.up, self.down = (nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False),
                                         nn.Linear(hidden, d, bias=False))

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class ChunkedSwiGLU(nn.Module):
    """gpt-fast's: one w13 linear chunked into gate and up, its RMSNorm cast back with type_as."""

    def __init__(self, d=64, hidden=96):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.w13, self.w2 = nn.Linear(d, 2 * hidden, bias=False), nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        x32 = x.float()
        h = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * self.weight
        gate, up = self.w13(h).chunk(2, dim=-1)
        return x + self.w2(F.silu(gate) * up)


class Conv1DMLP(nn.Module):
    """GPT-2's: addmm over a [K, N] weight, then its GELU written out op by op."""

    def __init__(self, d=64):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.w, self.b = nn.Parameter(torch.randn(d, 4 * d) * d ** -0.5), nn.Parameter(torch.randn(4 * d) * 0.1)

    def forward(self, x):
        h = torch.addmm(self.b, self.ln(x).view(-1, x.shape[-1]), self.w).view(*x.shape[:-1], -1)
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))


class SharedNorm(nn.Module):
    """A norm whose output is also returned: it cannot go into the matmul."""

    def __init__(self, d=64):
        super().__init__()
        self.ln, self.fc = nn.LayerNorm(d), nn.Linear(d, d)

    def forward(self, x):
        h = self.ln(x)
        return torch.relu(self.fc(h)), h


def _fused_sources(result) -> list[str]:
    """The source of each fused-linear kernel the package launches."""
    plan = result.variants[0].plan
    return [s.kernel.source for c in plan.combos for s in c.subs if s.kernel.heuristic == "matmul"]


def _fused_kernels(result) -> list[str]:
    """The summary line of each fused-linear kernel the package launches."""
    return [source.splitlines()[2].strip("# ") for source in _fused_sources(result)]


def _check(model, x, tmp_path, dtype):
    torch.manual_seed(0)
    model = model.to(dtype).eval()
    result = build_package(model, (x.to(dtype),), arch=["sm_90"], out=tmp_path, cache=False)
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    got = interpret.run_variant(result, 0, [fresh.to(dtype)])
    with torch.no_grad():
        ref = model.double()(fresh.double())
        eager = model.to(dtype)(fresh.to(dtype))
    for mine, exact, theirs in zip(*[(t,) if isinstance(t, torch.Tensor) else t for t in (got, ref, eager)]):
        tolerance = 1e-5 if dtype == torch.float32 else max(1e-2, 2 * relative_error(theirs, exact))
        assert relative_error(mine, exact) <= tolerance
    return result


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pre_norm_block_is_five_launches(tmp_path, dtype):
    torch.manual_seed(0)
    result = _check(PreNormBlock(), torch.randn(4, 32, 64), tmp_path, dtype)
    kernels = _fused_kernels(result)
    assert len(kernels) == 4 and sum("layer norm first" in k for k in kernels) == 2
    assert any("gelu_tanh" in k for k in kernels) and sum("then add;" in k for k in kernels) == 2
    assert result.summary()["launches_per_forward"] == 5  # 4 fused linears + attention


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_and_swiglu_go_into_the_matmuls(tmp_path, dtype):
    torch.manual_seed(0)
    result = _check(SwiGLU(), torch.randn(4, 32, 64), tmp_path, dtype)
    kernels = _fused_kernels(result)
    assert len(kernels) == 1 and "twice (gate and up)" in kernels[0] and "rms norm first" in kernels[0]
    assert "silu, mul" in kernels[0]
    assert result.summary()["launches_per_forward"] == 2  # the fused gate/up, then down with the residual as C


def test_a_chunked_gate_up_and_type_as(tmp_path):
    torch.manual_seed(0)
    result = _check(ChunkedSwiGLU(), torch.randn(4, 32, 64), tmp_path, torch.bfloat16)
    kernels = _fused_kernels(result)
    assert len(kernels) == 1 and "twice (gate and up)" in kernels[0] and "rms norm first" in kernels[0]


def test_addmm_over_a_conv1d_weight_and_gelu_written_out(tmp_path):
    torch.manual_seed(0)
    result = _check(Conv1DMLP(), torch.randn(4, 32, 64), tmp_path, torch.bfloat16)
    kernels = _fused_kernels(result)
    assert len(kernels) == 1 and "layer norm first" in kernels[0] and "tanh" in kernels[0]
    assert result.summary()["launches_per_forward"] == 1


def test_a_norm_used_elsewhere_stays_its_own_kernel(tmp_path):
    torch.manual_seed(0)
    model = SharedNorm().eval()
    result = build_package(model, (torch.randn(4, 32, 64),), arch=["sm_90"], out=tmp_path, cache=False)
    kernels = _fused_kernels(result)
    assert len(kernels) == 1 and "norm first" not in kernels[0] and "relu" in kernels[0]
    fresh = torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(1))
    got = interpret.run_variant(result, 0, [fresh])
    with torch.no_grad():
        ref = model(fresh)
    assert all(relative_error(a, b) <= 1e-5 for a, b in zip(got, ref))


def test_large_matmuls_stay_cublas(monkeypatch):
    torch.manual_seed(0)
    model, x = PreNormBlock().eval(), torch.randn(4, 32, 64)
    monkeypatch.setattr(linear_match, "FUSED_MAX_FLOPS_FP32", 2 * 128 * 64 * 64 - 1)  # below the smallest here
    graph, _, _ = trace_entry.trace_model(model, (x,), 90)
    assert not any(isinstance(op, g.Extern) and op.op.startswith("aotcombo::") for op in graph.ops)
    cublas = [op.op for op in graph.ops if isinstance(op, g.Extern) and op.op.startswith(("aten::addmm", "aten::mm",
                                                                                         "aten::_addmm"))]
    assert len(cublas) == 4 and cublas.count("aten::_addmm_activation.default") == 1  # fc1's GELU in its epilogue


def test_a_matmul_of_few_tiles_stays_cublas(tmp_path):
    torch.manual_seed(0)
    model = SharedNorm().eval()
    result = build_package(model, (torch.randn(1, 8, 64),), arch=["sm_90"], out=tmp_path, cache=False)
    assert _fused_kernels(result) == []  # 8 rows x 64 columns: 2 programs, under FUSED_MIN_PROGRAMS


class DecodeLayer(nn.Module):
    """An LLM decode step's linears at a few rows: RMSNorm -> q, RMSNorm -> gate/up ->
    silu(gate) * up -> down + residual."""

    def __init__(self, d=128, hidden=256):
        super().__init__()
        self.norm, self.mlp = RMSNorm(d), SwiGLU(d, hidden)
        self.q = nn.Linear(d, d, bias=False)

    def forward(self, x):
        return self.q(self.norm(x)), self.mlp(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_batch_1_decode_step_s_linears_are_gemvs(tmp_path, dtype):
    torch.manual_seed(0)
    result = _check(DecodeLayer(), torch.randn(1, 1, 128), tmp_path, dtype)
    kernels = _fused_kernels(result)
    assert len(kernels) == 3 and all("gemv" in k for k in kernels)  # the bare down projection too
    assert sum("rms norm first" in k for k in kernels) == 2 and any("silu, mul" in k for k in kernels)
    # one pass over x: the norm's squares summed in the loop that reads W, 1 / rms after it
    normed = [s for s in _fused_sources(result) if "rms norm first" in s.splitlines()[2]]
    assert len(normed) == 2 and all("squares += a * a" in s and "row statistics" not in s for s in normed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_gemv_s_norm_over_a_k_its_steps_do_not_divide(tmp_path, dtype):
    """k = 2500 in steps of 512 or 2048: the last step's x masked past k, its squares zeros."""
    torch.manual_seed(0)
    result = _check(DecodeLayer(2500, 300), torch.randn(1, 1, 2500), tmp_path, dtype)
    steps = [int(k.rsplit("x", 1)[1].split()[0]) for k in _fused_kernels(result) if "rms norm first" in k]
    assert len(steps) == 2 and all(2500 % step and step < 2500 for step in steps)


def test_at_4_rows_the_linears_are_long_k_tiles(tmp_path):
    torch.manual_seed(0)
    result = _check(DecodeLayer(512, 1024), torch.randn(4, 1, 512), tmp_path, torch.bfloat16)
    kernels = _fused_kernels(result)
    assert len(kernels) == 3 and all(k.endswith("tiles 16x32x256") for k in kernels)  # the bare down too


def test_the_tile_rule():
    Tiles = kernels_linear_recipe.Tiles
    # ViT-tiny's qkv: 54 programs
    assert kernels_linear_recipe.tiles(34, 576, 192, "bfloat16") == Tiles(16, 32, 64, 4, 3)
    assert kernels_linear_recipe.tiles(128, 128, 128, "bfloat16") == Tiles(16, 32, 128, 4, 3)  # k in one step
    assert kernels_linear_recipe.tiles(16, 1536, 1024, "bfloat16") == Tiles(16, 32, 128, 4, 3)  # 96 programs
    # batch-1 decode
    # one row: 8 x 512 summed once, the columns halved to 2 while under 528 programs (k steps
    # then of 1024); a GLU 2 x 2048 summed per step
    assert kernels_linear_recipe.tiles(1, 6144, 4096, "bfloat16") == Tiles(1, 8, 512, 4, 1, gemv=True, sum_once=True)
    assert kernels_linear_recipe.tiles(1, 4096, 4096, "bfloat16") == Tiles(1, 4, 512, 4, 1, gemv=True, sum_once=True)
    assert kernels_linear_recipe.tiles(1, 1536, 1024, "bfloat16") == Tiles(1, 2, 1024, 4, 1, gemv=True, sum_once=True)
    assert kernels_linear_recipe.tiles(1, 1024, 2816, "bfloat16") == Tiles(1, 2, 1024, 4, 1, gemv=True, sum_once=True)
    assert kernels_linear_recipe.tiles(1, 14336, 4096, "bfloat16", glu=True) == Tiles(1, 2, 2048, 4, 1, gemv=True)
    # quantized weights, one row: 8 KB of W a program and step, k steps of 2048, the columns halved
    # while under 264 programs; a GLU 4 rows, k steps of 2048 int8 or 4096 int4 (at most k)
    assert kernels_linear_recipe.tiles(1, 3072, 2048, "bfloat16", bits=8) == Tiles(1, 4, 2048, 4, 1, gemv=True,
                                                                                  sum_once=True)
    assert kernels_linear_recipe.tiles(1, 3072, 2048, "bfloat16", bits=4) == Tiles(1, 8, 2048, 4, 1, gemv=True,
                                                                                  sum_once=True)
    assert kernels_linear_recipe.tiles(1, 2048, 8192, "bfloat16", bits=4) == Tiles(1, 4, 2048, 4, 1, gemv=True,
                                                                                  sum_once=True)
    assert kernels_linear_recipe.tiles(1, 8192, 2048, "bfloat16", glu=True, bits=8) == Tiles(1, 4, 2048, 4, 1,
                                                                                            gemv=True)
    assert kernels_linear_recipe.tiles(1, 8192, 4096, "bfloat16", glu=True, bits=4) == Tiles(1, 4, 4096, 4, 1,
                                                                                            gemv=True)
    assert kernels_linear_recipe.tiles(1, 20, 8, "bfloat16") == Tiles(1, 2, 8, 4, 1, gemv=True, sum_once=True)
    assert kernels_linear_recipe.tiles(8, 1536, 1024, "bfloat16") == Tiles(16, 32, 256, 4, 3)  # batch 8: long k steps
    assert kernels_linear_recipe.tiles(1, 1536, 1024, "float32") == Tiles(1, 2, 1024, 4, 1, gemv=True, sum_once=True)
    assert kernels_linear_recipe.tiles(4, 1536, 1024, "float32") == Tiles(16, 32, 32, 4, 2)  # float32: as any matmul
    assert kernels_linear_recipe.tiles(1024, 1024, 256, "bfloat16") == Tiles(64, 64, 64, 4, 3)  # 256 programs already
    assert kernels_linear_recipe.tiles(4, 20, 8, "float32") == Tiles(16, 32, 16, 4, 2)
    assert kernels_linear_recipe.tiles(256, 1024, 256, "float32") == Tiles(16, 64, 32, 4, 2)  # 16 rows for fp32


def test_the_recipe_round_trips_through_json():
    recipe = kernels_linear_recipe.Recipe(
        m=4, n=8, k=16, weight_layout="kn", bias="row", glu=True, norm="rms", eps=1e-6, norm_weight=True,
        norm_bias=False, norm_cast="bfloat16", extras=("full",), epilogue=(("t0", "silu", ("acc",)),
                                                                           ("t1", "mul", ("t0", "acc_up"))),
        result="t1", dtype="bfloat16", out_dtype="bfloat16")
    assert kernels_linear_recipe.Recipe.from_json(recipe.to_json()) == recipe


@pytest.mark.parametrize("shape,stride,rows", [
    ((8, 64), (64, 1), 64),
    ((2, 4, 64), (256, 64, 1), 64),
    (("batch", 1, 192), (192, "192*batch", 1), 192),  # CaiT's class token under a dynamic batch
    ((2, 1, 192), (192, 384, 1), 192),  # a dim of size 1: its stride is any
    (("batch", "seq", 32), ("32*seq", 32, 1), 32),
    ((1, 1, 32), (96, 32, 1), 32),  # one row
    ((2, 4, 64), (64, 128, 1), None),  # rows not at one stride
])
def test_a_fused_linears_rows_are_at_the_stride_of_its_innermost_dim_longer_than_1(shape, stride, rows):
    from aotcombo.builder.kernels.linear.lowering import row_stride

    assert row_stride(g.TensorSpec(shape, stride, "float32")) == rows
