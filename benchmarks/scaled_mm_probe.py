#!/usr/bin/env python3
"""The float8 GEMMs of a Llama 3.2 1B prefill (512 tokens) against bf16's, one shape at a time: what each
``torch._scaled_mm`` call costs and launches (issue 27: a float8 prefill 1.3x faster than bf16's).

    python3 benchmarks/scaled_mm_probe.py [--tokens 512] [--out $OUT]

Per linear shape (q/k/v and gate/up combined, as the packages call them): bf16 ``x @ W.t()`` (cuBLAS);
float8 with a scale per row of x and per output channel of W (as the packages call it, ``use_fast_accum``);
the same with the operands swapped (``out.t() = W x.t()``: cuBLAS picks its tiles for N x M); float8
with unit scales into float32, alone, and with the two scales then applied and rounded to bf16 (per row
as a kernel after the product); float8 with one scale each (per tensor). Each variant is timed as a
CUDA graph of calls replayed (``fused_linear_bench.time_graph``: median us per call), and profiled once outside a graph:
the kernels and memsets one call launches, by name.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fused_linear_bench import time_graph  # CUDA-graph replays, median us per call

SHAPES = {"qkv": (2048, 3072), "o": (2048, 2048), "gate_up": (2048, 16384), "down": (8192, 2048),
          "lm_head": (2048, 128256)}  # (K, N)
F8 = torch.float8_e4m3fn


def variants(m: int, k: int, n: int) -> dict:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    xq, wq = x.to(F8), w.to(F8)
    row_a = torch.rand(m, 1, device="cuda", dtype=torch.float32) + 0.5
    row_b = torch.rand(1, n, device="cuda", dtype=torch.float32) + 0.5
    col_a, col_b = row_a.t().contiguous(), row_b.t().contiguous()
    one_a, one_b = (torch.ones((), device="cuda", dtype=torch.float32) for _ in range(2))
    return {
        "bf16": lambda: x @ w.t(),
        "fp8_rowwise": lambda: torch._scaled_mm(xq, wq.t(), row_a, row_b, out_dtype=torch.bfloat16,
                                                use_fast_accum=True),
        # the same product transposed: W's bytes the first operand, out^T [N, M] (a view of it is out)
        "fp8_rowwise_swapped": lambda: torch._scaled_mm(wq, xq.t(), col_b, col_a, out_dtype=torch.bfloat16,
                                                        use_fast_accum=True).t(),
        # per row as the unit-scaled product in float32, each row's and column's scale applied after it
        "fp8_unit_f32": lambda: torch._scaled_mm(xq, wq.t(), one_a, one_b, out_dtype=torch.float32,
                                                 use_fast_accum=True),
        "fp8_unit_f32_scaled": lambda: (torch._scaled_mm(xq, wq.t(), one_a, one_b, out_dtype=torch.float32,
                                                         use_fast_accum=True) * row_a * row_b).to(torch.bfloat16),
        "fp8_tensorwise": lambda: torch._scaled_mm(xq, wq.t(), one_a, one_b, out_dtype=torch.bfloat16,
                                                   use_fast_accum=True),
    }


def launched(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.key[:80]: e.count for e in prof.key_averages() if e.device_time_total > 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for name, (k, n) in SHAPES.items():
        for variant, fn in variants(args.tokens, k, n).items():
            row = {"shape": name, "m": args.tokens, "k": k, "n": n, "variant": variant,
                   "us": round(time_graph(lambda _: fn(), [None]), 2), "launches": launched(fn)}
            rows.append(row)
            print(json.dumps(row))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "scaled_mm_probe.jsonl", "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
