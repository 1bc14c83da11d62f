#!/usr/bin/env python3
"""The quantized GEMVs of a Llama 3.2 1B decode step (one row; kernels/linear/quant_gemv.py), each
linear with the tile rule's config and others, int8 (a scale per output channel) and int4 (two a
byte, a scale per group of 128, values less 8: torchao's symmetric int4), on the GPU.

    python3 benchmarks/quant_gemv_bench.py [--out DIR] [--bits 8,4] [--linears qkv,o,gateup,down,head]

The kernels are rendered by ``lowering.kernel_for`` (the build's source) and compiled here by Triton;
each checked on fresh inputs against the float64 product of the dequantized weight (relative L2
<= 1e-2), then timed in CUDA graphs (``fused_linear_bench.time_graph``: medians of replays of 10
calls over 4 input sets). Per linear: microseconds and the weight bytes (and scales) streamed per
second, the rule's config first, then ``CANDIDATES`` (BLOCK_N x BLOCK_K / warps), the fastest marked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from fused_linear_bench import decode_recipe, fused_kernel, reference, time_graph  # noqa: E402

from aotcombo.builder.kernels.linear import recipe  # noqa: E402
from aotcombo.builder.kernels.linear.quant import Quant, dequantize_eager  # noqa: E402
from aotcombo.testing.compare import relative_error  # noqa: E402

LINEARS = {"qkv": (2048, 3072, "rms"), "o": (2048, 2048, "addmm"), "gateup": (2048, 8192, "glu"),
           "down": (8192, 2048, "addmm"), "head": (2048, 128256, "plain")}
QUANTS = {8: Quant(8, 0, False, "none", 0.0, "bfloat16"), 4: Quant(4, 128, False, "none", 8.0, "bfloat16")}
# (BLOCK_N, weights a k step, warps)
CANDIDATES = {8: ((2, 2048, 4), (4, 1024, 4), (4, 2048, 4), (8, 1024, 4), (8, 2048, 4), (16, 1024, 4), (4, 1024, 2),
                  (8, 1024, 2), (16, 1024, 8), (4, 2048, 1), (4, 2048, 2)),
              4: ((2, 2048, 4), (4, 2048, 4), (8, 2048, 4), (16, 2048, 4), (4, 2048, 2), (8, 2048, 2), (16, 2048, 2),
                  (8, 1024, 2), (4, 4096, 4), (2, 2048, 1), (4, 2048, 1), (8, 2048, 1))}
SETS = 4


def operands(r: recipe.Recipe, device, seed: int) -> dict:
    gen = torch.Generator(device=device).manual_seed(seed)
    rows, q = r.n * (2 if r.glu else 1), r.quant

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(torch.bfloat16)

    t = {"x": rand(r.m, r.k)}
    if q.bits == 8:
        t["w"] = torch.randint(-127, 128, (rows, r.k), generator=gen, device=device, dtype=torch.int8)
        t["scale"] = rand(rows, scale=0.01).abs() / r.k ** 0.5
    else:
        t["w"] = torch.randint(0, 256, (rows, r.k // 2), generator=gen, device=device, dtype=torch.uint8)
        t["scale"] = rand(rows, r.k // q.group, scale=0.1).abs() / r.k ** 0.5
    if r.bias:
        t["bias"] = rand(r.m, r.n)
    if r.norm_weight:
        t["norm_weight"] = 1 + rand(r.k, scale=0.1)
    t["out"] = torch.empty(r.m, r.n, dtype=torch.bfloat16, device=device)
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--bits", default="8,4")
    parser.add_argument("--linears", default=",".join(LINEARS))
    args = parser.parse_args()
    device, rows = torch.device("cuda"), []
    with tempfile.TemporaryDirectory() as tmp:
        for bits in (int(b) for b in args.bits.split(",")):
            for name in args.linears.split(","):
                k, n, pattern = LINEARS[name]
                q = QUANTS[bits] if bits == 4 else dataclasses.replace(QUANTS[8], group=k)
                r = dataclasses.replace(decode_recipe(1, k, n, pattern), quant=q)
                sets = [operands(r, device, seed) for seed in range(SETS)]
                check = operands(r, device, 100)
                exact = dict(check, w=dequantize_eager(check["w"], check["scale"], None, q).double())
                want = reference(r, exact, torch.float64)
                nbytes = sets[0]["w"].numel() + sets[0]["scale"].numel() * 2
                rule = recipe.tiles(1, n, k, r.dtype, glu=r.glu, bits=bits)
                configs = [None] + [recipe.Tiles(1, bn, min(bk, k), warps, 1, gemv=True, sum_once=not r.glu)
                                    for bn, bk, warps in CANDIDATES[bits]
                                    if (bn, min(bk, k), warps) != (rule.block_n, rule.block_k, rule.num_warps)]
                timed = {}
                for config in configs:
                    try:
                        launch, made = fused_kernel(r, sets[0], Path(tmp), config)
                        label = "rule " * (config is None) + (f"{made.tiles[1][1]}x{made.tiles[2][1]}/"
                                                              f"{made.num_warps}w")
                        check["out"].fill_(float("nan"))
                        launch(check)
                        error = relative_error(check["out"], want)
                        timed[label] = (round(time_graph(launch, sets), 2) if error <= 1e-2
                                        else f"WRONG {error:.1e}")
                    except Exception as exc:  # noqa: BLE001 - a config that does not compile or fit
                        timed[str(config)] = f"{type(exc).__name__}: {str(exc)[:80]}"
                us = {k_: v for k_, v in timed.items() if isinstance(v, float)}
                fastest = min(us, key=us.get) if us else None
                row = {"bits": bits, "linear": name, "k": k, "n": n, "mb": round(nbytes / 1e6, 2), "us": timed,
                       "gb_per_s": {k_: round(nbytes / v / 1e3) for k_, v in us.items()}, "fastest": fastest,
                       "device": torch.cuda.get_device_name()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "quant_gemv_bench.jsonl", "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    for row in rows:
        print(f"int{row['bits']} {row['linear']:6} {row['mb']:7.2f} MB: " + ", ".join(
            f"{'*' * (k_ == row['fastest'])}{k_} {v} us ({row['gb_per_s'].get(k_, '-')} GB/s)"
            if isinstance(v, float) else f"{k_} {v}" for k_, v in row["us"].items()))


if __name__ == "__main__":
    main()
