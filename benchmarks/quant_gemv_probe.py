#!/usr/bin/env python3
"""Quantized GEMVs of other designs against the package's (``kernels/linear/quant_gemv.py``), at a
Llama 3.2 1B decode step's linears (one row of bf16 x): int4 as torchao's symmetric int4 (two a byte,
low nibble first, a bf16 scale per group of 128, values less 8), int8 with a scale per output channel.
Probes, not yet kernel paths.

Why: the package's quantized GEMVs are bound by instructions, not bytes (H200, quant_gemv_bench.py:
the int4 gate/up at 10.05 us is 1.67 TB/s; about 7 instructions a weight, ncu), and int8's reach
57 % of the copy bandwidth. Three designs that spend fewer:

- int4 ``dot``: four bytes become eight bf16 ``128 + nibble`` by two byte permutes, a shift and four
  LOP3s (one instruction a weight, exact), a group's products go through ``tl.dot`` (x as the one
  live column of a 16-column operand), and the 128s and the zero point leave through one sum of x a
  group: sum((128 + q) x) - 136 sum(x) = sum((q - 8) x), then the group's scale.
- int4 ``hfma2``, on the CUDA cores: four bytes become four fp16 pairs of (q - 8) by three shifts,
  four LOP3s and four subtractions, times x's pairs and summed by one HMUL2 and three HFMA2
  (``HFMA2``; eight products, each half a sum of four rounded to fp16), the pairs summed in float32
  per group.
- int8 ``hfma2``: four bytes become two fp16 pairs by a LOP3 (the sign bits), two byte permutes and
  two subtractions, times x's pairs by an HMUL2 and an HFMA2 (``HFMA2_INT8``).

x's fp16 pairs are made once a program, x taken / 16 (int4) or / 128 (int8) first, exactly, so that
no sum overflows fp16 (65504) for activations below 2^15 and 2^14 (``--check`` tries outliers).
``--plain``: Triton's integer ops and float32 instead of the inline PTX (what Triton's interpreter
can run: ``TRITON_INTERPRET=1 python3 benchmarks/quant_gemv_probe.py --plain --check``, which also
checks the PTX blocks' logic with numpy).

    python3 benchmarks/quant_gemv_probe.py [--bits 4,8] [--linears qkv,o,gateup,down] [--kernels dot,hfma2]

Per linear: the rule's kernel of the package and these at several tiles, us (CUDA graphs,
``fused_linear_bench.time_graph``) and GB/s over the weight's bytes and scales, each checked
against the float64 product of the dequantized weight (relative L2 <= 1e-2).

What it found (H100, torch 2.11, triton 3.6, 2026-12-06, one run, us, the package's rule against the
best of these): int8 q/k/v 3.60 against 5.29 (hfma2, 32 rows x 4 splits), o 2.94 against 4.93, gate/up
13.91 against 14.30, down 8.40 against 11.18; int4 down 5.67 against 16.78 (dot, 64 x 4) and 16.99
(hfma2, 32 x 4); int4 gate/up's best here 14.28 (hfma2, 64 x 4). All were within 1.5-1.8e-3 of float64.
Fewer instructions a weight did not make these faster: their programs hold 32-256 rows (the rule's
hold 4) and so fewer programs and bytes in flight. None became a kernel path.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch
import triton
import triton.language as tl

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from fused_linear_bench import decode_recipe, fused_kernel, reference, time_graph  # noqa: E402
from quant_gemv_bench import LINEARS, QUANTS, operands  # noqa: E402

from aotcombo.builder.kernels.linear.quant import dequantize_eager  # noqa: E402
from aotcombo.testing.compare import relative_error  # noqa: E402

GROUP = 128
# (BLOCK_N, SPLIT_K, warps). Static SASS of a step's loop (sm_90, Triton 3.8, nvdisasm), instructions a
# weight a thread at 32 / 64 / 128 rows a program: int4 dot 10.6 / 5.9 / 3.7, int4 hfma2 4.9 / 4.4 / 3.0,
# int8 hfma2 3.2 / 3.1 / 3.1; the package's rule kernels (4 rows a program): int4 about 8 (gate/up, no
# loop) and 6.2 (down), int8 10.1 (down). At an H200's 4.2 TB/s, 132 SMs issuing 4 warp instructions a
# cycle at 1.98 GHz leave about 4 instructions an int4 weight and 8 an int8 one.
TILES = ((64, 1, 4), (128, 1, 4), (64, 2, 4), (64, 4, 4), (128, 2, 4), (128, 4, 4), (128, 2, 8), (256, 2, 8),
         (32, 4, 4))


@triton.jit
def _store(out_ptr, rn, acc, SPLIT_K: tl.constexpr):
    """A program's float32 sums: stored, or added to the other k splits' (the output zeroed first)."""
    if SPLIT_K == 1:
        tl.store(out_ptr + rn, acc)
    else:
        tl.atomic_add(out_ptr + rn, acc)


@triton.jit
def _fp16_pair(x_ptr, WORDS: tl.constexpr, PER_WORD: tl.constexpr, j: tl.constexpr, HALF: tl.constexpr,
               SCALE: tl.constexpr):
    """x * SCALE at k = PER_WORD w + j and PER_WORD w + j + HALF of each word w as one fp16 pair (int32)."""
    at = x_ptr + PER_WORD * tl.arange(0, WORDS) + j
    lo = (tl.load(at).to(tl.float32) * SCALE).to(tl.float16)
    hi = (tl.load(at + HALF).to(tl.float32) * SCALE).to(tl.float16)
    return (lo.to(tl.int16, bitcast=True).to(tl.int32) & 65535) | (hi.to(tl.int16, bitcast=True).to(tl.int32) << 16)


@triton.jit
def int4_gemv(x_ptr, w_ptr, s_ptr, out_ptr, K: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
              PLAIN: tl.constexpr, GROUP_K: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    kb = tl.arange(0, GROUP_K // 2)
    cols = tl.arange(0, 16)
    acc = tl.zeros([BLOCK_N], tl.float32)
    groups: tl.constexpr = K // GROUP_K // SPLIT_K
    for i in range(groups):
        group = tl.program_id(1) * groups + i
        w = tl.load(w_ptr + rn[:, None] * (K // 2) + group * (GROUP_K // 2) + kb[None, :])
        if PLAIN:  # float32 (Triton's interpreter runs bfloat16 dots wrong)
            lo, hi, offset = (w & 15).to(tl.float32), (w >> 4).to(tl.float32), 8.0
        else:  # four bytes (pack=4) -> eight bf16 128 + nibble (0x4300 is 128.0, the nibble its mantissa's
            # low bits): $0, $1 the low nibbles of bytes 0-1 and 2-3, $2, $3 the high ones (``emulate``)
            lo, hi = tl.inline_asm_elementwise(
                "{ .reg .b32 t0, t1; prmt.b32 t0, $4, 0, 0x4140; prmt.b32 t1, $4, 0, 0x4342; "
                "lop3.b32 $0, t0, 0x000F000F, 0x43004300, 0xEA; lop3.b32 $1, t1, 0x000F000F, 0x43004300, 0xEA; "
                "shr.u32 t0, t0, 4; shr.u32 t1, t1, 4; "
                "lop3.b32 $2, t0, 0x000F000F, 0x43004300, 0xEA; lop3.b32 $3, t1, 0x000F000F, 0x43004300, 0xEA; }",
                "=r,=r,=r,=r,r", [w], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)
            offset = 136.0
        weights = tl.interleave(lo, hi)  # [BLOCK_N, GROUP_K]: k = 2 b, 2 b + 1
        x = tl.load(x_ptr + group * GROUP_K + tl.arange(0, GROUP_K))
        columns = tl.where(cols[None, :] == 0, x[:, None], 0.0).to(weights.dtype)  # [GROUP_K, 16], x in column 0
        if PLAIN:
            dot = tl.dot(weights, columns, input_precision="ieee")
        else:
            dot = tl.dot(weights, columns)
        products = tl.sum(tl.where(cols[None, :] == 0, dot, 0.0), 1)
        scale = tl.load(s_ptr + rn * (K // GROUP_K) + group).to(tl.float32)
        acc += (products - offset * tl.sum(x.to(tl.float32), 0)) * scale
    _store(out_ptr, rn, acc, SPLIT_K)



# Four bytes -> the eight (q - 8) as fp16 pairs, times x's pairs, summed: one fp16 pair a word. The
# pairs are (k0, k4), (k1, k5), (k2, k6), (k3, k7) of the word's eight weights (k = 2 byte + nibble):
# the low nibbles of bytes 0 and 2, or'ed into fp16 1024 (0x6400: the nibble its mantissa's low bits),
# then bytes 0 and 2's high ones, bytes 1 and 3's (shifts of 4, 8, 12); 1032 subtracted (exact).
HFMA2 = tl.constexpr("{ .reg .b32 a, b, c, d, t, m; mov.b32 m, 0x64086408; "
         "lop3.b32 a, $1, 0x000F000F, 0x64006400, 0xEA; "
         "shr.u32 t, $1, 4; lop3.b32 b, t, 0x000F000F, 0x64006400, 0xEA; "
         "shr.u32 t, $1, 8; lop3.b32 c, t, 0x000F000F, 0x64006400, 0xEA; "
         "shr.u32 t, $1, 12; lop3.b32 d, t, 0x000F000F, 0x64006400, 0xEA; "
         "sub.rn.f16x2 a, a, m; sub.rn.f16x2 b, b, m; sub.rn.f16x2 c, c, m; sub.rn.f16x2 d, d, m; "
         "mul.rn.f16x2 t, a, $2; fma.rn.f16x2 t, b, $3, t; fma.rn.f16x2 t, c, $4, t; fma.rn.f16x2 $0, d, $5, t; }")


@triton.jit
def int4_hfma2(x_ptr, w_ptr, s_ptr, out_ptr, K: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
               PLAIN: tl.constexpr, GROUP_K: tl.constexpr):
    """A group's 128 weights as 16 words a row; each word's eight products in fp16 pairs (``HFMA2``),
    the pairs summed in float32, the group's scale applied."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    kw = tl.arange(0, GROUP_K // 8)
    acc = tl.zeros([BLOCK_N, GROUP_K // 8], tl.float32)  # a word's sums, scaled; summed across once, after
    groups: tl.constexpr = K // GROUP_K // SPLIT_K
    for i in range(groups):
        group = tl.program_id(1) * groups + i
        rows = (w_ptr + rn[:, None] * (K // 2) + group * (GROUP_K // 2)).to(tl.pointer_type(tl.int32))
        w = tl.load(rows + kw[None, :])  # [BLOCK_N, 16] words of four bytes
        xg = x_ptr + group * GROUP_K
        if PLAIN:  # Triton's integer ops and float32 (the interpreter runs no PTX)
            sums = tl.zeros([BLOCK_N, GROUP_K // 8], tl.float32)
            for j in tl.static_range(8):
                q = ((w >> (4 * j)) & 15).to(tl.float32) - 8.0
                sums += q * tl.load(xg + 8 * kw + j).to(tl.float32)[None, :]
            products = sums
        else:
            p0 = tl.broadcast_to(_fp16_pair(xg, GROUP_K // 8, 8, 0, 4, 0.0625)[None, :], w.shape)
            p1 = tl.broadcast_to(_fp16_pair(xg, GROUP_K // 8, 8, 1, 4, 0.0625)[None, :], w.shape)
            p2 = tl.broadcast_to(_fp16_pair(xg, GROUP_K // 8, 8, 2, 4, 0.0625)[None, :], w.shape)
            p3 = tl.broadcast_to(_fp16_pair(xg, GROUP_K // 8, 8, 3, 4, 0.0625)[None, :], w.shape)
            half = tl.inline_asm_elementwise(HFMA2, "=r,r,r,r,r,r", [w, p0, p1, p2, p3], dtype=tl.int32,
                                             is_pure=True, pack=1)
            lo = (half & 65535).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            hi = (half >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            products = lo + hi
        scale = tl.load(s_ptr + rn * (K // GROUP_K) + group).to(tl.float32)
        if not PLAIN:
            scale = scale * 16.0  # x was taken / 16 (exact)
        acc += products * scale[:, None]
    acc = tl.sum(acc, 1)
    _store(out_ptr, rn, acc, SPLIT_K)


# Four int8 bytes -> two fp16 pairs (k0, k2), (k1, k3): the sign bits flipped (b + 128, unsigned), each
# byte put under 0x64 by a byte permute (fp16 1024 + b + 128), 1152 subtracted (exact), times x's pairs.
HFMA2_INT8 = tl.constexpr("{ .reg .b32 u, a, b, m; mov.b32 m, 0x64806480; lop3.b32 u, $1, 0x80808080, 0, 0x3C; "
                          "prmt.b32 a, u, 0x64646464, 0x4240; prmt.b32 b, u, 0x64646464, 0x4341; "
                          "sub.rn.f16x2 a, a, m; sub.rn.f16x2 b, b, m; "
                          "mul.rn.f16x2 a, a, $2; fma.rn.f16x2 $0, b, $3, a; }")


@triton.jit
def int8_hfma2(x_ptr, w_ptr, s_ptr, out_ptr, K: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
               PLAIN: tl.constexpr, GROUP_K: tl.constexpr):
    """int8 with a scale per output channel: GROUP_K weights a step as words of four; each word's four
    products in one fp16 pair (``HFMA2_INT8``), the pairs summed in float32, the scale after the loop."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    kw = tl.arange(0, GROUP_K // 4)
    acc = tl.zeros([BLOCK_N, GROUP_K // 4], tl.float32)  # a word's sums; summed across once, after
    steps: tl.constexpr = K // GROUP_K // SPLIT_K
    for i in range(steps):
        step = tl.program_id(1) * steps + i
        rows = (w_ptr + rn[:, None] * K + step * GROUP_K).to(tl.pointer_type(tl.int32))
        w = tl.load(rows + kw[None, :])  # [BLOCK_N, GROUP_K / 4] words of four bytes
        xg = x_ptr + step * GROUP_K
        if PLAIN:
            sums = tl.zeros([BLOCK_N, GROUP_K // 4], tl.float32)
            for j in tl.static_range(4):
                b = ((w << (24 - 8 * j)) >> 24).to(tl.float32)  # byte j, sign-extended
                sums += b * tl.load(xg + 4 * kw + j).to(tl.float32)[None, :]
            acc += sums
        else:
            p0 = tl.broadcast_to(_fp16_pair(xg, GROUP_K // 4, 4, 0, 2, 0.0078125)[None, :], w.shape)
            p1 = tl.broadcast_to(_fp16_pair(xg, GROUP_K // 4, 4, 1, 2, 0.0078125)[None, :], w.shape)
            half = tl.inline_asm_elementwise(HFMA2_INT8, "=r,r,r,r", [w, p0, p1], dtype=tl.int32, is_pure=True,
                                             pack=1)
            lo = (half & 65535).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            hi = (half >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
            acc += lo + hi
    acc = tl.sum(acc, 1) * tl.load(s_ptr + rn).to(tl.float32)
    if not PLAIN:
        acc = acc * 128.0  # x was taken / 128 (exact)
    _store(out_ptr, rn, acc, SPLIT_K)


def emulate_int8(words, x):
    """``HFMA2_INT8`` on uint32 ``words`` [n] and float ``x`` [n, 4] (numpy, fp16): its two halves [n, 2]."""
    import numpy as np

    words = np.asarray(words, dtype=np.uint32)
    b = [(((words >> (8 * j)) & 0xFF).astype(np.int16) ^ 0x80).astype(np.float16) + np.float16(1024) for j in range(4)]
    b = [v - np.float16(1152) for v in b]  # exact: fp16 holds 896..1279
    xs = np.asarray(x, dtype=np.float16)
    return np.stack([(b[1] * xs[:, 1] + b[0] * xs[:, 0]).astype(np.float32),
                     (b[3] * xs[:, 3] + b[2] * xs[:, 2]).astype(np.float32)], 1)


def emulate_hfma2(words, x):
    """``HFMA2`` on uint32 ``words`` [n] and float ``x`` [n, 8] (numpy, fp16 arithmetic rounded as
    the f16x2 ops are): each word's two fp16 halves, as float32 [n, 2]."""
    import numpy as np

    words = np.asarray(words, dtype=np.uint32)
    nibble = [((words >> (4 * j)) & 15).astype(np.float16) for j in range(8)]  # k = j: byte j // 2, its nibble
    xs = np.asarray(x, dtype=np.float16)
    halves = []
    for lane in (0, 4):  # the pair's low half: k = 0..3 (bytes 0, 1); high: k = 4..7 (bytes 2, 3)
        t = (nibble[lane] - np.float16(8)) * xs[:, lane]
        for j in range(1, 4):
            t = (nibble[lane + j] - np.float16(8)) * xs[:, lane + j] + t  # fma: one rounding, as near as numpy gets
        halves.append(t.astype(np.float32))
    return np.stack(halves, 1)


def emulate(words):
    """The kernel's PTX on uint32 ``words`` (numpy): its four outputs, as uint32."""
    import numpy as np

    words = np.asarray(words, dtype=np.uint32)
    b = [(words >> (8 * i)) & 0xFF for i in range(4)]
    t0, t1 = b[0] | (b[1] << 16), b[2] | (b[3] << 16)
    mask, magic = np.uint32(0x000F000F), np.uint32(0x43004300)
    return [(t0 & mask) | magic, (t1 & mask) | magic, ((t0 >> 4) & mask) | magic, ((t1 >> 4) & mask) | magic]


KERNELS = {4: {"dot": int4_gemv, "hfma2": int4_hfma2}, 8: {"hfma2": int8_hfma2}}
INT8_STEP = 512  # int8: weights a k step


def launch_probe(bits: int, kernel: str, k: int, n: int, block_n: int, split_k: int, warps: int, plain: bool):
    step = GROUP if bits == 4 else INT8_STEP

    def launch(t):
        out = t["out32"]
        if split_k > 1:
            out.zero_()
        KERNELS[bits][kernel][(n // block_n, split_k)](t["x"], t["w"], t["scale"], out, K=k, BLOCK_N=block_n,
                                                       SPLIT_K=split_k, PLAIN=plain, GROUP_K=step, num_warps=warps)
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--linears", default="qkv,o,gateup,down")
    parser.add_argument("--bits", default="4,8")
    parser.add_argument("--kernels", default="dot,hfma2", help="int4's dot, hfma2; int8's hfma2")
    parser.add_argument("--plain", action="store_true", help="Triton's casts, not the inline PTX")
    parser.add_argument("--check", action="store_true", help="check one tile of each linear only, no timing")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.check:  # the PTX's bit logic: each output half is the bf16 128 + its nibble
        import numpy as np

        words = np.random.default_rng(0).integers(0, 2 ** 32, 1000, dtype=np.uint64).astype(np.uint32)
        nibbles = [((words >> (8 * (i // 2) + 4 * (i % 2))) & 15) for i in range(8)]  # (byte, lo / hi)
        out = emulate(words)
        halves = {(0, 0): (out[0], 0), (1, 0): (out[0], 16), (2, 0): (out[1], 0), (3, 0): (out[1], 16),
                  (0, 1): (out[2], 0), (1, 1): (out[2], 16), (2, 1): (out[3], 0), (3, 1): (out[3], 16)}
        for (byte, high), (reg, shift) in halves.items():
            value = torch.from_numpy(((reg >> shift) & 0xFFFF).astype(np.int16)).view(torch.bfloat16).float()
            assert torch.equal(value, torch.from_numpy(nibbles[2 * byte + high].astype(np.float32)) + 128)
        print("PTX bit logic: ok")
        x = np.random.default_rng(1).standard_normal((1000, 8))
        terms = [(((words[:, None] >> (4 * np.arange(lane, lane + 4))) & 15) - 8.0) * x[:, lane:lane + 4]
                 for lane in (0, 4)]
        got = emulate_hfma2(words, x)
        for i, t in enumerate(terms):  # each sum of four within a few fp16 roundings of its terms' size
            assert (np.abs(got[:, i] - t.sum(1)) <= 2 ** -8 * np.abs(t).sum(1) + 1e-6).all(), "HFMA2's pairs"
        print("HFMA2 pairs: ok")
        x4 = x[:, :4]
        got = emulate_int8(words, x4)
        signed = [((words >> (8 * j)) & 0xFF).astype(np.int8).astype(np.float64) for j in range(4)]
        for i, (a, b) in enumerate(((0, 1), (2, 3))):
            t = np.stack([signed[a] * x4[:, a], signed[b] * x4[:, b]], 1)
            assert (np.abs(got[:, i] - t.sum(1)) <= 2 ** -9 * np.abs(t).sum(1) + 1e-6).all(), "int8 HFMA2's pairs"
        print("int8 HFMA2 pairs: ok")
        big = np.random.default_rng(2).standard_normal((1000, 8)) * 8000  # outliers, as the kernels scale them
        assert np.isfinite(emulate_hfma2(words, big / 16)).all()
        assert np.isfinite(emulate_int8(words, big[:, :4] / 128)).all()
        print("fp16 pairs of outliers (|x| up to about 3e4): finite")
    with tempfile.TemporaryDirectory() as tmp:
        for bits, name in ((int(b), name) for b in args.bits.split(",") for name in args.linears.split(",")):
            k, n, pattern = LINEARS[name]
            n = n * 2 if pattern == "glu" else n  # the gate/up pair as one GEMV of both halves
            quant = QUANTS[4] if bits == 4 else dataclasses.replace(QUANTS[8], group=k)
            r = dataclasses.replace(decode_recipe(1, k, n, "plain"), quant=quant)  # the products alone, both sides
            sets = [operands(r, device, seed) for seed in range(4)]
            for t in sets:
                t["out32"] = torch.empty(n, dtype=torch.float32, device=device)
            check = sets[0]
            exact = dict(check, w=dequantize_eager(check["w"], check["scale"], None, r.quant).double())
            want = reference(r, exact, torch.float64).reshape(-1)
            nbytes = check["w"].numel() + check["scale"].numel() * 2
            timed = {}
            if not args.check and device.type == "cuda":
                rule, _ = fused_kernel(r, check, Path(tmp))
                rule(check)
                timed["package's rule"] = (relative_error(check["out"].reshape(-1), want), time_graph(rule, sets))
            for kernel in (kernel for kernel in args.kernels.split(",") if kernel in KERNELS[bits]):
                for block_n, split_k, warps in TILES[:1] if args.check else TILES:
                    launch = launch_probe(bits, kernel, k, n, block_n, split_k, warps, args.plain)
                    launch(check)
                    error = relative_error(check["out32"], want)
                    us = time_graph(launch, sets) if not args.check else float("nan")
                    timed[f"{kernel} {block_n} rows x {split_k} splits / {warps}w"] = (error, us)
            print(f"int{bits} {name:6} k {k} n {n} ({nbytes / 1e6:.1f} MB):")
            for label, (error, us) in timed.items():
                verdict = "" if error <= 1e-2 else f"  WRONG ({error:.1e})"
                print(f"  {label:32} {us:7.2f} us  {nbytes / us / 1e3:6.0f} GB/s  error {error:.1e}{verdict}",
                      flush=True)


if __name__ == "__main__":
    main()
