"""What one fused linear computes (``Recipe``), its meaning in torch ops (the
``aotcombo::fused_linear`` custom op the rewrite calls), the pointwise ops an epilogue may hold,
and the tile rule its kernel is launched with. See ``match`` for the rewrite that makes one."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import torch

from ..common import cdiv, next_power_of_2
from .quant import Quant, dequantize_eager

OP = "aotcombo::fused_linear"
# benchmarks/results/fused_linear_bench.log: fused beats norm + cuBLAS + epilogue 1.2-2.7x up
# to 0.13 GFLOP, loses 0.5-0.8x from 0.45 GFLOP. float32 (tf32x3) lower: in place the fp32 GPT-2
# block ran 0.069 -> 0.091 ms fused (zoo/zoo_bench_fp32.log). Weights over 2 MiB: the LLM decode
# step went 0.338 -> 0.356 ms fused (llm_bench_fused.log). Under 16 programs a few programs walk
# the whole k loop (DLRM's 8-row MLP: 0.042 -> 0.053 ms); every win measured had 18 or more.
# Many rows (benchmarks/large_linear_bench.py, H100, 2026-11-27, us; BERT-base's FFN-up and its GELU
# against cuBLAS + Inductor's GELU kernel): our tl.dot tiles at 16384 rows 206 (128 x 256 x 64, 8 warps)
# against 199, at 4096 57 against 53, at 1024 18.9 against 17.2; x and W through tensor descriptors no
# faster (222 at 16384); a persistent, warp-specialized kernel with descriptors (Triton's tutorial 09)
# 184 against 196-203 and 53 against 53-58, within the runs' 10 % spread, though it matched cuBLAS
# on the bias-only GEMMs (94 against 95 us): the GELU costs as much inside the kernel as after it.
# Only at 128 rows did a fused GELU win (6.2 against torch's 6.8 us).
# H200, 2026-11-29 (benchmarks/gemm_epilogue_probe.py, two runs): the whole tile's libdevice GELU spilled
# (56-88 bytes of stack); stored in 2 or 4 column slices it does not, and a polynomial erfc is no cheaper. Best
# fused, 16384 rows: 178-186 us against cuBLAS + GELU 196-211 (0.88-0.91x), 4096: 48-51 against 50 (0.95-1.0x),
# 1576: 25 against 21 (1.19x); bias alone 123-129 against cuBLAS's 117-119. Two programs an SM, a warp-
# specialized loop: the epilogue still adds its 55-60 us. So cuBLAS keeps the large linears. H100, 2026-12-05
# (torch's profiler, BERT-base at 32 x 512): Inductor's GELU kernel after it now takes 68 us a layer, at the
# copy's bandwidth (a copy of its 201 MB: 70 us): less than the GELU costs inside the fused kernel.
# Nor do row chunks pay (benchmarks/ffn_chunk_probe.py, H100, 2026-12-05, addmm -> GELU -> addmm, us):
# 16384 rows whole 303, in 2 / 4 / 8 chunks sharing one intermediate (kept in L2) 314 / 331 / 378;
# 8192 rows 156 / 164 / 186 / 233: the GEMMs lose more on fewer rows than the GELU gains from L2.
# Nor a post-norm block's residual add as cuBLASLt's C (beta = 1), the norm after it reading one tensor
# (benchmarks/residual_epilogue_probe.py, H100, 2026-12-06, us, GEMM then norm): at 16384 rows k 768
# 55.3 as built against 58.9, k 3072 137.9 against 146.4: reading C costs the GEMM more than the norm saves.
# Few rows, large weights (benchmarks/skinny_gemm_probe.py, H200, 2026-12-03, CUDA graphs, us; the best of
# 32 configs: [BLOCK_M, BLOCK_N, BLOCK_K] in {64, 128}^3, K split 1-8 ways, the last program of a tile
# summing the float32 partials): against cuBLAS, the 1B's q/k/v at 128 rows 7.97 / 6.58, o 7.69 / 6.19,
# gate/up 22.9 / 21.9, down 17.1 / 15.5; o at 512 rows 11.4 / 8.8, BERT-base's q/k/v at 1024 13.2 / 7.9, o 6.0 / 4.9.
FUSED_MAX_FLOPS = 2 ** 27  # 2*M*N*K
FUSED_MAX_FLOPS_FP32 = 2 ** 24
FUSED_MAX_WEIGHT_BYTES = 2 ** 21
FUSED_MIN_PROGRAMS = 16
MIN_PROGRAMS = 64  # the tile rule shrinks tiles until the grid has this many programs
# A matmul of one row, or of up to DECODE_MAX_ROWS rows in 16 bits (an LLM decode step), reads
# each weight element for a few products: memory-bound whatever its FLOPs or weight bytes, so
# it is ours, bare or not (tiles()). One row: a GEMV on the CUDA cores, W read as [BLOCK_N,
# BLOCK_K] tiles along its contiguous k (float32 too: exact products, no shared memory).
# H200, Llama-3-8B's and 3.2-1B's decode linears (fused_linear_bench.py --decode --rows 1
# --shapes llama8b / llama1b; results/gemv8b/): 4 warps, the products of a tile (4096 elements:
# 32 a thread) summed per lane across the k loop, over k once after it (sum_once: no cross-warp
# reduction and barrier per step), GEMV_BLOCK_N x GEMV_BLOCK_K, the columns halved while under
# GEMV_MIN_PROGRAMS programs, down to GEMV_MIN_BLOCK_N, k steps of at least GEMV_MIN_TILE
# elements (4 x 512 beat 4 x 1024 at 8B's o and down, 2 x 1024 beat 2 x 2048 and 4 x 1024 at
# 1B's): 8B q/k/v 8 x 512 16.9 us (the former
# 4 x 1024 summed per step: 19.0), o 4 x 512 11.4 (11.8), down 4 x 512 31.0 (32.4), lm head
# 8 x 512 237 (249; 16 x 256 235); 1B o and down 2 x 1024 3.9 and 10.9 (4.4, 14.1). A GLU
# (gate and up: two products) takes GEMV_GLU_TILES summed per step: summed once, its two
# [BLOCK_N, BLOCK_K] float32 accumulators cost more than the barrier (8B 62.5 us against
# 66-72 for every tile summed once, 1B 21.2 against 21.3-25); H100 2026-11-26 (results/gemv_glu/), 2 x 2048
# against 4 x 1024: 8B 79.4 against 81.9, 1B 25.2 against 25.9, a rank's of 8B at TP 2 (N 7168) 43.4 against
# 49.5 (quantized GLUs keep 4 rows: int8 2 x 2048 19.0 against 17.1 us at the 1B). Next W tile prefetched in
# registers: no gain (within noise either way), not kept. 2-8 rows (H100, llm_decode,
# results/fused_linear_bench_decode*.log): tensor-core tiles of 16 x 32 x 256 (the GEMV's
# [8, 4, 1024] products spill there): steps at batch 4 and 8 1.1x faster.
GEMV_MAX_ROWS, GEMV_BLOCK_N, GEMV_BLOCK_K, GEMV_MIN_BLOCK_N, GEMV_MIN_TILE = 1, 8, 512, 2, 2048
GEMV_MIN_PROGRAMS = 4 * 132  # 4 a multiprocessor of an H100 or H200
GEMV_GLU_TILES = (2, 2048)  # (BLOCK_N, BLOCK_K), summed per step
QUANT_GEMV_GLU_TILES = (4, 1024)  # a quantized GLU's, its k step in 16-bit elements
DECODE_MAX_ROWS, DECODE_BLOCK_N, DECODE_MAX_BLOCK_K = 8, 32, 256
DECODE_DTYPES = (torch.bfloat16, torch.float16)
# A weight-only quantized weight (quant.py) reads a quarter to a half of the bytes of a 16-bit
# one for the same products: up to 16 rows ours (dequantized in registers); more, Inductor's
# dequantize-then-matmul (the weight dequantized per call, as the model wrote it). One row: a loop
# of its own (quant_gemv.py): W's bytes as [BLOCK_N, chunks, 16] tiles, a thread's 16 contiguous
# bytes one 128-bit load, x (and the norm's weight) loaded in that shape so that every load of the
# loop takes the bytes' layout, a chunk's products summed in its thread (fused multiply-adds) and
# scaled once, int4's byte used whole (lo x0 + hi x1 = b x0 + hi (x1 - 16 x0)); tiles as below
# (QUANT_GEMV_TILE_BYTES; first k steps of 16 / bits times a 16-bit GEMV's elements), GEMV_QUANT_WARPS
# warps. The 16-bit GEMV's loop it replaces had Triton move W's tile or x through shared memory every
# k step (to one layout: 12 to 212 shared-memory instructions and barriers a thread), loaded the
# int4 bytes once per nibble and the group scale once per weight. SASS a weight byte, whole
# program, the 1B's five linears (sm_90, "bits"): int8 10.4-14.9 -> 5.8-10.7, int4 31-50 -> 12-20
# (the norm's x work weighs most).
# H100, Llama 3.2 1B step at batch 1, quantized_llm_bench.py, ms/token (% of copy bandwidth),
# 2026-11-26: the 16-bit GEMV's loop, bf16 1.114 (74 %), int8 0.998 (41 %), int4 two a byte, group
# 128, 1.344 (16 %); QUANT_CONVERT "bits" int8 0.908 (45 %), int4 1.331 (16 %: it did not move);
# k steps of 16 / bits times the elements and the int4 bytes loaded once, interleaved, changed
# neither. The loop of its own, "bits" (positions 5 / 1000): bf16 1.094 / 1.090 (75 / 77 %), int8
# 0.756 / 0.750 (55 / 56 %: 0.69x bf16), int4 0.680 / 0.678 (31 / 33 %: 0.62x); GEMV_QUANT_WARPS 2
# (twice the rows a thread, a fifth fewer instructions a byte) the same: 0.754, 0.686.
# QUANT_CONVERT "bits" makes each integer a float by bit operations (its bits or'ed into 2^23's,
# 2^23 subtracted: exact for 0..255) instead of the conversion instruction (16 a clock per SM on
# sm_80/sm_90, against 64 to 128 for integer and float ones); "cvt" converts. "perm" (quant_gemv.permute_asm,
# inline PTX) does the same with one byte permute a byte: the four bytes of a 32-bit register xor'ed with
# 0x80 at once (int8), each moved into the low byte of 2^23's bits by a PRMT, int4's high nibbles masked
# four at once and moved into 2^19's, where "bits" extracted each byte and or'ed it (a LOP3 more a byte):
# SASS of the quantized_decode sample's GEMVs (sm_90) 4-10 % fewer instructions. H200, 2026-12-01,
# quantized_llm_bench.py, "bits" and "perm" packages in turn in one run, positions 5 / 1000 (copy 4246
# GB/s): int8 0.640 / 0.666 -> 0.629 / 0.656 ms (0.741x -> 0.728x bf16's 0.864), int4 0.651 / 0.678 ->
# 0.641 / 0.667 (0.753x -> 0.742x); the same errors against float32 (the outputs bit for bit, as "cvt"'s
# under the interpreter: tests/unit/test_quantized_linears.py).
# Its tiles (but a GLU's): QUANT_GEMV_TILE_BYTES of W a program and step, k steps of QUANT_GEMV_BLOCK_K
# elements (int8 4 x 2048, int4 8 x 2048), the columns halved while under QUANT_GEMV_MIN_PROGRAMS programs,
# down to GEMV_MIN_BLOCK_N. H100, quant_gemv_bench.py (2026-11-26, results/quant_gemv/), microseconds, the
# 1B's linears, the rule before -> now: int8 q/k/v 6.05 -> 5.16, o 3.63 -> 3.43, down 10.49 -> 10.64,
# lm head 115.0 -> 97.7; int4 q/k/v 5.38 -> 5.18, o 3.94 -> 3.76, down 7.86 -> 7.68, lm head 79.4 (same);
# the 1B step (quantized_llm_bench.py, position 5): int8 0.756 -> 0.719 ms (0.665x bf16's 1.082), int4 0.680 -> 0.669.
# Tried, not kept (2026-11-27, same bench, position 5, one run each): W's first tile loaded before the PDL
# wait (W is written by no kernel) and each step's next tile before the current one is used: bf16 1.063 ->
# 1.100 ms, int8 0.717 -> 0.788, int4 0.663 -> 0.682; the next-tile loads alone, the wait at the kernel's
# start: bf16 1.059 -> 1.118, int8 0.712 -> 0.777; the wait inside and the next kernel let start only after
# it: 1.103, 0.800. The registers the tiles hold cost more than the latency they hide.
# Tried, not kept (2026-11-29, H200, same bench, one run, positions 5 / 1000, copy 4244 GB/s): a GEMV
# alone in its combo, launched early, asking its program's first 16 KB of W rows into L2
# (prefetch.global.L2, 128-byte lines over its threads) before its PDL wait: bf16 0.874 -> 0.985 ms,
# int8 0.649 -> 0.714, int4 0.660 -> 0.675; 64 KB: 1.019, 0.718, 0.676. Without the prefetch those
# are 0.743x (int8) and 0.756x (int4) bf16's on the H200.
# Tried, not kept (2026-12-02, H200, same bench, old and new packages in turn in one run, positions
# 5 / 1000): a GEMV with its norm inside reads x for the norm's statistics (a sum across the program)
# before it asks for W; its first W tile asked for before the statistics instead (one tile's
# registers, the loop taking it at k0 == 0): bf16 0.867 / 0.872 -> 0.892 / 0.897 ms, int8 0.630 /
# 0.635 -> 0.635 / 0.640, int4 0.644 / 0.649 -> 0.638 / 0.644; the same errors against float32.
# Tried, not kept (2026-12-03, H200, same bench, one run, position 1000, main then B C D in turn): B, every
# combo letting the next launch start at its end, not its start: bf16 0.873 -> 0.914 ms, int8 0.602 -> 0.643,
# int4 0.498 -> 0.533; C, a GEMV whose k is one step loading its rows' W before its PDL wait (then
# triggering at its end; small tiles: four rows a program): int8 0.644, int4 0.540; D, both: 0.667, 0.564.
# "unit" (quant_gemv.unit, the default): weights scaled per group (int4's) take each byte as 1 + byte /
# 2^15, one byte permute into bits 8-15 of 1.0's and no subtraction a weight; the ones (and a constant
# zero point) leave each chunk's sum through one sum of x a chunk (quant_gemv.carrier), x's work shared by
# the thread's rows. SASS of the 1B's int4 GEMVs (sm_90): q/k/v 832 -> 720, o 408 -> 360, gate/up 848 ->
# 736, down 432 -> 384, lm head 648 -> 536. H200, quantized_llm_bench.py, both packages in one run,
# positions 5 / 1000, 2026-12-02: int4 0.646 / 0.653 -> 0.600 / 0.608 ms (0.745x -> 0.692x bf16's 0.867),
# errors against float32 1.78e-2 -> 1.70e-2. Per output channel (int8 weight-only) it stays "perm": a
# carrier summed per element there is a row's own accumulator, an add a weight again: int8 0.633 ->
# 0.732 ms in the same run.
QUANT_MAX_ROWS = 16
QUANT_CONVERT = "unit"  # or "perm", "bits", "cvt"
# A GEMV's RMS norm (q/k/v, gate/up of a decode step) was a pass over x for its statistics, a
# reduction across the program, then the loop: W's loads waited for x's and the barrier. Every
# product is linear in x, so 1 / rms now multiplies the loop's sums, its squares summed in the loop
# from the x it loads (lowering.rstd_after, quant_gemv.rstd_after; not rounded to bf16 where eager
# rounds x / rms: nearer the exact products). SASS (sm_90) of the 1B's int4 q/k/v 456 -> 408
# instructions, gate/up 696 -> 648, every load before the first barrier. H200, 2026-12-05,
# quantized_llm_bench.py, packages in turn in one run, positions 5 / 1000, medians of 200: the 1B
# step bf16 0.844 / 0.867 -> 0.838 / 0.861 ms, int8 0.574 / 0.597 -> 0.557 / 0.579, int4 0.473 /
# 0.495 -> 0.467 / 0.489 (int8 0.66x, int4 0.56x bf16's). Tried, not kept: tensor-core tiles of at
# most 16 rows the same way (each step's squares summed across its tile; SASS of llm_decode's batch-8
# q/k/v tile 1264 -> 576 instructions): that sample's step at batch 8 0.168 / 0.161 -> 0.227 / 0.226
# ms (H200, 2026-12-05, llm_bench.py, two rounds of packages in turn, default call; the rope fold
# before it 0.167 / 0.170 -> 0.168 / 0.161, main without the tiles' change 0.172 / 0.162).
RSTD_AFTER = True
# Tried, not kept (H100, 2026-12-05, quantized_llm_bench.py, the 1B step, packages in one run, positions 5 / 1000,
# copy 2999 GB/s): the quantized GEMVs in 2 or 1 warps a program (k over fewer threads, more weights a thread:
# SASS 5.0 -> 3.9 -> 3.5 instructions a weight at int4's gate/up) are slower, fewer bytes in flight an SM:
# int8 0.648 / 0.668 ms (4 warps) -> 0.700 / 0.721 (2) -> 0.790 / 0.810 (1), int4 0.507 / 0.525 -> 0.540 / 0.560
# -> 0.605 / 0.622, against bf16's 1.025 / 1.045 (80 % of copy): int8 0.63x, int4 0.49-0.50x bf16's with 4.
GEMV_QUANT_WARPS = 4  # a quantized GEMV's
QUANT_GEMV_TILE_BYTES, QUANT_GEMV_BLOCK_K, QUANT_GEMV_MIN_PROGRAMS = 8192, 2048, 2 * 132
# float32 products as three tf32 ones (tensor cores): 1.2-1.8e-7 from float64, below the
# 2.4-4.1e-7 of Triton's "ieee" dot, and 1.7-3x faster.
FP32_DOT_PRECISION = "tf32x3"
FLOAT_DTYPES = ("float16", "bfloat16", "float32")

aten = torch.ops.aten


@dataclass(frozen=True)
class Recipe:
    """What one fused linear computes; operands follow x and W in this order: the bias, the
    norm's weight and bias (those present), then ``extras``."""

    m: int
    n: int
    k: int
    weight_layout: str  # "nk": a linear's weight [N, K]; "kn": addmm's mat2 [K, N]
    bias: str | None  # None | "row" ([N]) | "full" ([M, N], addmm's C): added before rounding
    glu: bool  # W has 2N rows: two products, "acc" by its first N rows and "acc_up" by its last N
    norm: str | None  # None | "layer" | "rms"
    eps: float
    norm_weight: bool
    norm_bias: bool
    norm_cast: str | None  # rms: the dtype the normalized x is rounded to before the weight scales it
    extras: tuple[str, ...]  # per extra operand: "full" | "row"
    epilogue: tuple[tuple[str, str, tuple], ...]  # (value, op, args): args are values, "e<i>", numbers
    result: str  # the value stored ("acc": the product itself)
    dtype: str  # of x, W and their product
    out_dtype: str  # of the value stored
    quant: Quant | None = None  # W is quantized bytes; its scale (and zero) lead the operands
    # The rows are a size of the dynamic axes, given at run time; ``m`` is their upper bound
    # (``fuse(ep, max_tokens=...)``), which sizes the tiles and the grid. x and the result then
    # keep their leading dims ([batch, seq, k] -> [batch, seq, n]).
    dynamic_rows: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Recipe":
        raw = json.loads(text)
        raw["extras"] = tuple(raw["extras"])
        raw["epilogue"] = tuple((v, op, tuple(args)) for v, op, args in raw["epilogue"])
        raw["quant"] = Quant(**raw["quant"]) if raw.get("quant") else None
        return cls(**raw)


@torch.library.custom_op(OP, mutates_args=())
def fused_linear(x: torch.Tensor, weight: torch.Tensor, operands: list[torch.Tensor], recipe: str) -> torch.Tensor:
    """The recipe in torch ops (eager, any device): the meaning ``lower``'s kernel implements."""
    r = Recipe.from_json(recipe)
    rows = x.shape[:-1]
    x = x.reshape(-1, r.k)
    operands = [o.reshape(-1, o.shape[-1]) if o.dim() > 1 else o for o in operands]
    take = operands.pop
    if r.quant:
        scale = take(0)
        weight = dequantize_eager(weight, scale, take(0) if r.quant.zero != "none" else None, r.quant)
    bias = take(0) if r.bias else None
    a = x.float()
    if r.norm == "layer":
        a = (a - a.mean(-1, keepdim=True)) * torch.rsqrt(a.var(-1, unbiased=False, keepdim=True) + r.eps)
    elif r.norm == "rms":
        a = a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + r.eps)
    if r.norm and r.norm_cast:
        a = a.to(getattr(torch, r.norm_cast)).float()
    if r.norm_weight:
        a = a * take(0).float()
    if r.norm_bias:
        a = a + take(0).float()
    w = weight.float() if r.weight_layout == "kn" else weight.float().t()
    acc = a.to(weight.dtype).float() @ w
    if bias is not None:
        acc = acc + bias.float()
    acc = acc.to(weight.dtype).float()
    values = {"acc": acc[:, :r.n], "acc_up": acc[:, r.n:]} if r.glu else {"acc": acc}
    values.update({f"e{i}": e.float() for i, e in enumerate(operands)})
    for out, op, args in r.epilogue:
        values[out] = EPILOGUE_OPS[op][1](*(values[a] if isinstance(a, str) else a for a in args))
    return values[r.result].to(getattr(torch, r.out_dtype)).reshape(*rows, r.n)


@fused_linear.register_fake
def _(x, weight, operands, recipe):
    r = Recipe.from_json(recipe)
    return x.new_empty((*x.shape[:-1], r.n), dtype=getattr(torch, r.out_dtype))


# op -> (Triton expression on float32 values, the same in torch)
EPILOGUE_OPS = {
    "add": ("{0} + {1}", lambda a, b: a + b),
    "sub": ("{0} - {1}", lambda a, b: a - b),
    "rsub": ("{1} - {0}", lambda a, b: b - a),
    "mul": ("{0} * {1}", lambda a, b: a * b),
    "div": ("{0} / {1}", lambda a, b: a / b),
    "neg": ("-{0}", lambda a: -a),
    "square": ("{0} * {0}", lambda a: a * a),
    "cube": ("{0} * {0} * {0}", lambda a: a * a * a),
    "pow": ("libdevice.pow({0}, {1})", lambda a, e: torch.pow(a, e)),
    "tanh": ("libdevice.tanh({0})", torch.tanh),
    "erf": ("libdevice.erf({0})", torch.erf),
    "exp": ("libdevice.exp({0})", torch.exp),
    "sigmoid": ("tl.sigmoid({0})", torch.sigmoid),
    "relu": ("tl.where({0} != {0}, {0}, tl.maximum({0}, 0.0))", torch.relu),
    "silu": ("{0} * tl.sigmoid({0})", torch.nn.functional.silu),
    "gelu": ("0.5 * {0} * (1.0 + libdevice.erf({0} * 0.7071067811865476))", torch.nn.functional.gelu),
    "gelu_tanh": ("0.5 * {0} * (1.0 + libdevice.tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))",
                  lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    "round_bfloat16": ("{0}.to(tl.bfloat16).to(tl.float32)", lambda a: a.bfloat16().float()),
    "round_float16": ("{0}.to(tl.float16).to(tl.float32)", lambda a: a.half().float()),
    "copy": ("{0}", lambda a: a),
}


@dataclass(frozen=True)
class Tiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    gemv: bool = False  # products summed on the CUDA cores, all rows in one tile (tl.dot: False)
    sum_once: bool = False  # gemv: products summed per lane across the k loop, across lanes after it


def tiles(m: int, n: int, k: int, dtype: str, glu: bool = False, bits: int = 16) -> Tiles:
    """Tiles by rule (the fastest configs measured, for parallelism). Up to ``GEMV_MAX_ROWS``
    rows: a GEMV, all rows in one tile, 4 warps: ``GEMV_BLOCK_N`` x ``GEMV_BLOCK_K`` (k steps
    at most k), summed once, the columns halved while under ``GEMV_MIN_PROGRAMS`` programs,
    down to ``GEMV_MIN_BLOCK_N``, the k step then grown to ``GEMV_MIN_TILE`` elements; a GLU
    (``glu``: each program two products of ``n`` columns) ``GEMV_GLU_TILES``, summed per step.
    16-bit, up to ``DECODE_MAX_ROWS``: 16 x ``DECODE_BLOCK_N``, k steps of up to
    ``DECODE_MAX_BLOCK_K``, 4 warps, 3 stages. Else 64 x 64 (16 rows for float32), shrunk rows
    first to 16, then columns to 32, while under ``MIN_PROGRAMS`` programs; k steps of 64, 128
    for few rows or a k of 128 (float32: 32); 4 warps; 3 stages (float32: 2). A GEMV over ``bits``-bit
    quantized weights: ``QUANT_GEMV_TILE_BYTES`` of W a step, k steps of ``QUANT_GEMV_BLOCK_K``, columns
    halved while under ``QUANT_GEMV_MIN_PROGRAMS`` programs, ``GEMV_QUANT_WARPS`` warps; its GLU takes
    k steps of 16 / ``bits`` times a 16-bit one's elements (the same bytes). Where its rows can be
    taken one at a time, ``quant_gemv.row_tiles`` replaces these."""
    wide = dtype != "float32"
    if m <= GEMV_MAX_ROWS:
        block_m, warps = next_power_of_2(m), 4 if bits == 16 else GEMV_QUANT_WARPS
        if glu:
            block_n, block_k = GEMV_GLU_TILES if bits == 16 else QUANT_GEMV_GLU_TILES
            return Tiles(block_m, block_n, min(next_power_of_2(k), block_k * 16 // bits), warps, 1, gemv=True)
        if bits < 16:
            block_k = min(next_power_of_2(k), QUANT_GEMV_BLOCK_K)
            block_n = min(2 * GEMV_BLOCK_N, max(GEMV_MIN_BLOCK_N, QUANT_GEMV_TILE_BYTES * 8 // (bits * block_k)))
            while cdiv(n, block_n) < QUANT_GEMV_MIN_PROGRAMS and block_n > GEMV_MIN_BLOCK_N:
                block_n //= 2
            return Tiles(block_m, block_n, block_k, warps, 1, gemv=True, sum_once=True)
        block_n = GEMV_BLOCK_N
        while cdiv(n, block_n) < GEMV_MIN_PROGRAMS and block_n > GEMV_MIN_BLOCK_N:
            block_n //= 2
        block_k = max(GEMV_BLOCK_K, GEMV_MIN_TILE // block_n) * 16 // bits
        return Tiles(block_m, block_n, min(next_power_of_2(k), block_k), warps, 1, gemv=True, sum_once=True)
    if wide and m <= DECODE_MAX_ROWS:
        block_k = min(next_power_of_2(k), DECODE_MAX_BLOCK_K)
        return Tiles(16, DECODE_BLOCK_N, block_k, num_warps=4, num_stages=3)
    block_m, block_n = min(64 if wide else 16, max(16, next_power_of_2(m))), min(64, max(32, next_power_of_2(n)))
    while cdiv(m, block_m) * cdiv(n, block_n) < MIN_PROGRAMS and block_m > 16:
        block_m //= 2
    while cdiv(m, block_m) * cdiv(n, block_n) < MIN_PROGRAMS and block_n > 32:
        block_n //= 2
    block_k = (128 if m <= 16 or k <= 128 else 64) if wide else 32
    return Tiles(block_m=block_m, block_n=block_n, block_k=min(block_k, max(16, next_power_of_2(k))),
                 num_warps=4, num_stages=3 if wide else 2)
