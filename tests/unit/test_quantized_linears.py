"""Weight-only quantized linears (builder/kernels/linear/quant.py, quant_match.py): the
dequantize the model writes is found, a decode step's linears become kernels of ours that read
the int8 / packed int4 bytes and dequantize in registers, and the package holds the bytes and
the scales, never a dequantized copy.

Each model is built for sm_90 and run under Triton's interpreter on fresh random inputs.
Tolerance (relative L2 against the model in float64, its weights dequantized exactly): bf16 <=
max(1e-2, 2 x eager bf16's own error), as for the other fused linears.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo.builder import graph as g
from aotcombo.builder.kernels.linear import quant
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import entry as trace_entry
from aotcombo.errors import UnsupportedModelError
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

GROUP = 128


class Int8(nn.Module):
    """int8 [N, K], a bf16 scale per output channel, on the product or on the weight."""

    def __init__(self, n, k, scale_output):
        super().__init__()
        w = torch.randn(n, k)
        scale = w.abs().amax(1) / 127
        self.register_buffer("weight", torch.round(w / scale[:, None]).to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))
        self.scale_output = scale_output

    def forward(self, x):
        if self.scale_output:
            return F.linear(x, self.weight.to(x.dtype)) * self.scale
        return F.linear(x, self.weight.to(x.dtype) * self.scale[:, None])


class Int4(nn.Module):
    """Two int4 a uint8 along K, a scale per group of 128; ``layout``: "point" ((q - z) * s, the
    even k low), "high_first" (the same, the even k high), "symmetric" ((q - 8) * s),
    "offset" (q * s + z), "halves" (k < K / 2 low, the rest high: not a layout aotcombo reads)."""

    def __init__(self, n, k, layout="point"):
        super().__init__()
        self.layout, groups = layout, k // GROUP
        q = torch.randint(0, 16, (n, k), dtype=torch.uint8)
        first, second = (q[:, :k // 2], q[:, k // 2:]) if layout == "halves" else (q[:, 0::2], q[:, 1::2])
        if layout == "high_first":
            first, second = second, first
        self.register_buffer("weight", first | (second << 4))
        self.register_buffer("scale", (torch.rand(n, groups) * 0.02 + 0.01).to(torch.bfloat16))
        self.register_buffer("zero", (torch.randint(0, 16, (n, groups)).float()
                                      if layout != "offset" else torch.randn(n, groups) * 0.1).to(torch.bfloat16))

    def forward(self, x):
        low, high = self.weight & 0xF, self.weight >> 4
        n = self.weight.shape[0]
        if self.layout == "halves":
            q = torch.cat([low, high], dim=1)
        else:
            q = torch.stack([high, low] if self.layout == "high_first" else [low, high], dim=-1).view(n, -1)
        q = q.to(x.dtype).view(n, -1, GROUP)
        if self.layout == "symmetric":
            w = (q - 8) * self.scale[..., None]
        elif self.layout == "offset":
            w = q * self.scale[..., None] + self.zero[..., None]
        else:
            w = (q - self.zero[..., None]) * self.scale[..., None]
        return F.linear(x, w.view(n, -1))


class Block(nn.Module):
    """q/k/v of one input (combined), then gate/up (combined: silu(gate) * up), then down with
    the residual; ``make(n, k)`` the quantized linear."""

    def __init__(self, make, d=512, hidden=512):
        super().__init__()
        self.q, self.k, self.v = make(d, d), make(d // 4, d), make(d // 4, d)
        self.gate, self.up, self.down = make(hidden, d), make(hidden, d), make(d, hidden)

    def forward(self, x):
        qkv = torch.cat([self.q(x), self.k(x), self.v(x)], dim=-1)
        h = torch.tanh(x)  # another input than q/k/v's
        return qkv, x + self.down(F.silu(self.gate(h)) * self.up(h))


def _int8(scale_output):
    return lambda n, k: Int8(n, k, scale_output)


def _int4(layout):
    return lambda n, k: Int4(n, k, layout)


def _ours(result) -> list[str]:
    """The summary line of each fused-linear kernel the package launches."""
    return [s.kernel.source.splitlines()[2].strip("# ") for c in result.variants[0].plan.combos for s in c.subs
            if s.kernel.heuristic == "matmul"]


def _build_and_check(model, rows, tmp_path):
    torch.manual_seed(0)
    model = model.to(torch.bfloat16).eval()
    x = torch.randn(rows, 1, 512)
    result = build_package(model, (x.to(torch.bfloat16),), arch=["sm_90"], out=tmp_path, cache=False)
    fresh = torch.randn(rows, 1, 512, generator=torch.Generator().manual_seed(1))
    got = interpret.run_variant(result, 0, [fresh.to(torch.bfloat16)])
    with torch.no_grad():
        # float64: the bytes dequantized exactly (the model's own ops, in float64)
        ref = copy.deepcopy(model).double()(fresh.double())
        eager = model(fresh.to(torch.bfloat16))
    for mine, exact, theirs in zip(got, ref, eager):
        assert relative_error(mine, exact) <= max(1e-2, 2 * relative_error(theirs, exact))
    _assert_the_model_s_own(result, model)
    return result


def _assert_the_model_s_own(result, model) -> None:
    """Every tensor the package holds is the model's own (or its own concatenated: q/k/v,
    gate/up), of its dtype: the bytes and the scales, never a dequantized copy."""
    dtypes = {n: str(t.dtype).removeprefix("torch.") for n, t in model.state_dict().items()}
    for w in result.manifest.weights.tensors:
        assert {dtypes.get(part) for part in w.name.split("|")} == {w.dtype}, w


def _weights(result) -> dict:
    return {w.name: (w.dtype, w.shape) for w in result.manifest.weights.tensors}


@pytest.mark.parametrize("scale_output", [True, False], ids=["scale_on_product", "scale_on_weight"])
def test_int8_decode_linears_are_ours_and_the_package_holds_int8(tmp_path, scale_output):
    result = _build_and_check(Block(_int8(scale_output)), 1, tmp_path)
    kernels = _ours(result)
    assert len(kernels) == 3 and all("weight int8, scale per output channel" in k and "gemv" in k for k in kernels)
    assert sum("[512, 768]" in k for k in kernels) == 1  # q, k and v: one kernel over their bytes concatenated
    assert sum("twice (gate and up)" in k and "silu, mul" in k for k in kernels) == 1
    weights = _weights(result)
    assert weights["q.weight|k.weight|v.weight"] == ("int8", (768, 512))
    assert weights["q.scale|k.scale|v.scale"] == ("bfloat16", (768,))
    assert weights["gate.weight|up.weight"] == ("int8", (1024, 512)) and weights["down.weight"][0] == "int8"
    # every float weight is a scale: no dequantized copy
    assert all(dtype == "int8" or len(shape) == 1 for dtype, shape in weights.values())


@pytest.mark.parametrize("rows", [4, 16])
def test_int4_grouped_at_a_few_rows_on_the_tensor_cores(tmp_path, rows):
    result = _build_and_check(Block(_int4("point")), rows, tmp_path)
    kernels = _ours(result)
    assert len(kernels) == 3 and all("weight int4, scale and zero point per group of 128" in k for k in kernels)
    assert all("gemv" not in k for k in kernels)
    sources = [s.kernel.source for c in result.variants[0].plan.combos for s in c.subs
               if s.kernel.heuristic == "matmul"]
    assert all("0x4B000000" in k for k in sources)  # the default conversion: nibbles or'ed into 2^23's bits
    weights = _weights(result)
    assert weights["q.weight|k.weight|v.weight"] == ("uint8", (768, 256))
    assert weights["q.scale|k.scale|v.scale"] == ("bfloat16", (768, 4))
    assert all(dtype == "uint8" or shape == (shape[0], 512 // GROUP) for dtype, shape in weights.values())


@pytest.mark.parametrize("layout", [pytest.param("point", marks=pytest.mark.slow), "high_first",
                                    pytest.param("symmetric", marks=pytest.mark.slow), "offset"])
def test_int4_layouts_as_gemvs(tmp_path, layout):
    """Each layout as GEMVs, in the default conversion; point and symmetric are ``slow`` here: the
    carrier test below builds and checks them so (and the others are ``slow`` there)."""
    result = _build_and_check(Block(_int4(layout)), 1, tmp_path)
    kernels = _ours(result)
    assert len(kernels) == 3 and all("weight int4" in k and "gemv" in k for k in kernels)


@pytest.mark.parametrize("weights", ["int4_symmetric", pytest.param("int4_point", marks=pytest.mark.slow), "int8"])
def test_a_gemv_whose_k_step_holds_a_chunk_a_thread_takes_its_rows_one_at_a_time(tmp_path, weights):
    """``quant_gemv.ROWS``: a GEMV whose k step holds a chunk a thread (the down projection's k of
    2048: 128 chunks of 8 bytes of int4, or 16 of int8, scaled per output channel and summed per
    chunk) takes its rows one at a time, x's work once for all of them; the narrower ones (k 512)
    in tiles of rows. Each within the float64 check."""
    make = _int8(True) if weights == "int8" else _int4(weights.removeprefix("int4_"))
    result = _build_and_check(Block(make, hidden=2048), 1, tmp_path)
    sources = [s.kernel.source for c in result.variants[0].plan.combos for s in c.subs
               if s.kernel.heuristic == "matmul"]
    by_rows = ["tl.static_range(BLOCK_N)" in source for source in sources]
    assert len(by_rows) == 3 and by_rows == [False, False, True]  # q/k/v, gate/up, down


@pytest.mark.parametrize("k", [1536, 2048, 3072, 11008])
@pytest.mark.parametrize("bits", [8, 4])
def test_row_tiles_are_powers_of_two(k, bits):
    """``quant_gemv.row_tiles``: the k step and the chunk a power of two at any k (Triton's
    ranges), a k past it masked."""
    from aotcombo.builder.kernels.linear import quant_gemv, recipe

    q = quant.Quant(bits, k if bits == 8 else 128, False, "none", 0.0 if bits == 8 else 8.0, "bfloat16")
    r = recipe.Recipe(m=1, n=4096, k=k, weight_layout="nk", bias=None, glu=False, norm=None, eps=1e-5,
                      norm_weight=False, norm_bias=False, norm_cast=None, extras=(), epilogue=(), result="acc",
                      dtype="bfloat16", out_dtype="bfloat16", quant=q)
    t = quant_gemv.row_tiles(r, recipe.tiles(1, 4096, k, "bfloat16", bits=bits))
    chunk = quant_gemv._row_chunk(r, t)
    assert chunk and all(v & (v - 1) == 0 for v in (t.block_n, t.block_k, chunk)) and t.block_k * 2 > min(k, 2048)


# int4's default conversion is "unit" (below): its "bits" and "perm" only in the slow set
@pytest.mark.parametrize("weights", ["int8", pytest.param("int4_symmetric", marks=pytest.mark.slow)])
def test_integers_made_floats_by_bit_operations(tmp_path, monkeypatch, weights):
    """``recipe.QUANT_CONVERT = "bits"``: each integer or'ed into 2^23's bits, 2^23 subtracted,
    not converted; "perm": the bytes placed into 2^23's bits by byte permutes (inline PTX, which the
    interpreter computes with numpy); the kernels say so, and the outputs are those of the
    converting ones, bit for bit."""
    from aotcombo.builder.kernels.linear import recipe

    torch.manual_seed(0)
    block = {"int8": lambda: Block(_int8(False)), "int4_symmetric": lambda: Block(_int4("symmetric"))}[weights]()
    fresh = torch.randn(1, 1, 512, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    outputs = []
    for mode in ("cvt", "bits", "perm"):
        monkeypatch.setattr(recipe, "QUANT_CONVERT", mode)
        result = _build_and_check(block, 1, tmp_path / mode)
        sources = "\n".join(result.variants[0].sources.values())
        assert ("0x4B000000" in sources) == (mode != "cvt")
        assert ("prmt.b32" in sources) == (mode == "perm")
        outputs.append(interpret.run_variant(result, 0, [fresh]))
    for cvt, *others in zip(*outputs):
        assert all(torch.equal(cvt, other) for other in others)


@pytest.mark.parametrize("weights", ["int8", "int4_symmetric", "int4_point",
                                     pytest.param("int4_high_first", marks=pytest.mark.slow),
                                     pytest.param("int4_offset", marks=pytest.mark.slow)])
def test_integers_made_floats_of_one_and_a_carrier_sum(tmp_path, monkeypatch, weights):
    """``recipe.QUANT_CONVERT = "unit"``: each byte placed in bits 8-15 of 1.0 (one byte permute,
    no subtraction a weight), the ones and a constant zero point taken off per chunk through a sum
    of x (``carrier``); weights scaled per output channel (this int8) keep "perm". Each layout within
    the float64 check, and within 2e-3 of the converting kernels' outputs (the carrier costs
    float32 bits, not bfloat16 ones)."""
    from aotcombo.builder.kernels.linear import recipe

    torch.manual_seed(0)
    layout = weights.removeprefix("int4_")
    block = Block(_int8(False)) if weights == "int8" else Block(_int4(layout))
    fresh = torch.randn(1, 1, 512, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    outputs = []
    for mode in ("cvt", "unit"):
        monkeypatch.setattr(recipe, "QUANT_CONVERT", mode)
        result = _build_and_check(block, 1, tmp_path / mode)
        sources = "\n".join(result.variants[0].sources.values())
        assert ("0x3F800000" in sources) == (mode == "unit" and weights != "int8")  # int8's scale: per channel
        assert ("0x4B000000" in sources and "prmt.b32" in sources) == (mode == "unit" and weights == "int8")
        outputs.append(interpret.run_variant(result, 0, [fresh]))
    for cvt, ones in zip(*outputs):
        assert relative_error(ones.float(), cvt.float()) <= 2e-3


def _layouts(model, x) -> list:
    """The dequantize calls the rewrite makes (before any kernel of ours takes them)."""
    found = []
    original = trace_entry.linear_combine.combine

    def spy(ep, module):
        found.extend(quant.parts(n)[2] for n in ep.graph.nodes if quant.is_dequantize(n))
        return original(ep, module)

    trace_entry.linear_combine.combine = spy
    try:
        graph, weights, _ = trace_entry.trace_model(model.to(torch.bfloat16).eval(), (x.to(torch.bfloat16),), 90)
    finally:
        trace_entry.linear_combine.combine = original
    return found, graph, weights


@pytest.mark.parametrize("layout, expected", [
    ("point", quant.Quant(4, GROUP, False, "point", 0.0, "bfloat16")),
    ("high_first", quant.Quant(4, GROUP, True, "point", 0.0, "bfloat16")),
    ("symmetric", quant.Quant(4, GROUP, False, "none", 8.0, "bfloat16")),
    ("offset", quant.Quant(4, GROUP, False, "offset", 0.0, "bfloat16")),
])
def test_the_layout_is_read_from_the_model_s_ops(layout, expected):
    torch.manual_seed(0)
    found, _, _ = _layouts(Int4(256, 512, layout), torch.randn(1, 512))
    assert found == [expected]


class ScaleView(Int8):
    """The scale on the product through a view and a cast: ``* self.scale.view(1, -1).to(x.dtype)``."""

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype)) * self.scale.float().view(1, -1).to(x.dtype)


def test_a_scale_on_the_product_through_views_and_casts():
    torch.manual_seed(0)
    found, graph, _ = _layouts(ScaleView(256, 512, True), torch.randn(1, 512))
    assert found == [quant.Quant(8, 512, False, "none", 0.0, "bfloat16")]
    assert [op.op for op in graph.ops if isinstance(op, g.Extern)] == ["aotcombo::fused_linear.default"]


def test_past_16_rows_inductor_dequantizes_and_the_weights_stay_int8():
    torch.manual_seed(0)
    _, graph, weights = _layouts(Block(_int8(False)), torch.randn(32, 1, 512))
    assert not any(isinstance(op, g.Extern) and op.op.startswith("aotcombo::") for op in graph.ops)
    assert {str(w.dtype) for w in weights.values()} == {"torch.int8", "torch.bfloat16"}
    assert all(w.dim() == 1 for w in weights.values() if w.dtype == torch.bfloat16)


def test_a_layout_aotcombo_cannot_read_is_refused_naming_the_layer():
    torch.manual_seed(0)
    model = nn.Sequential(Int4(256, 512, "halves")).to(torch.bfloat16).eval()
    with pytest.raises(UnsupportedModelError, match=r"layer 0: its weight \[256, 512\] is computed from "
                                                    r"0.weight \(uint8 \[256, 256\]\)") as caught:
        trace_entry.trace_model(model, (torch.randn(1, 512, dtype=torch.bfloat16),), 90)
    assert "int4 two per byte" in caught.value.fix


class Masked(nn.Module):
    """A pruning mask (bool) and a row index (int64) on a float weight: not quantized bytes."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(256, 512))
        self.register_buffer("mask", torch.rand(256, 512) > 0.5)
        self.register_buffer("rows", torch.randperm(256))

    def forward(self, x):
        return F.linear(x, (self.weight * self.mask)[self.rows])


def test_a_weight_computed_with_masks_or_indices_is_no_quantized_one():
    torch.manual_seed(0)
    found, graph, _ = _layouts(Masked(), torch.randn(1, 512))
    assert found == [] and graph.ops


def test_dequantize_and_its_expansion_agree():
    """The op's meaning (eager) and the ATen ops Inductor gets past 16 rows, on random bytes."""
    torch.manual_seed(0)
    spec = quant.Quant(4, GROUP, True, "point", 1.0, "bfloat16")
    q = torch.randint(0, 256, (64, 128), dtype=torch.uint8)
    scale, zero = torch.rand(64, 2).to(torch.bfloat16), torch.randint(0, 16, (64, 2)).to(torch.bfloat16)
    graph = torch.fx.Graph()
    leaves = [graph.placeholder(name) for name in ("q", "scale", "zero")]
    for leaf, value in zip(leaves, (q, scale, zero)):
        leaf.meta["val"] = value
    graph.output(quant._expanded(graph, leaves[0], leaves[1:], spec))
    expanded = torch.fx.GraphModule(torch.nn.Module(), graph)(q, scale, zero)
    low, high = (q & 15).int(), (q >> 4).int()
    values = torch.stack([high, low], -1).view(64, 256).float().view(64, 2, GROUP)
    want = ((values - 1.0 - zero.float()[..., None]) * scale.float()[..., None]).view(64, 256).to(torch.bfloat16)
    assert torch.equal(expanded, want)
    assert torch.equal(quant.dequantize(q, [scale, zero], spec.to_json()), want)
