#!/usr/bin/env python3
"""Probe: a Triton split-K GEMM of ours against cuBLAS (``F.linear``) for
linears of few rows and large weights, where cuBLAS runs well under the copy bandwidth (H200,
Llama 3.2 1B prefill at 128 tokens, benchmarks/kernel_profile.py: q/k/v 7.4 us, o 6.8 us, down
14 us + 2.5 us for its split-K reduction, over 13, 8 and 32 MB of weights).

Ours: ``y[M, N] = x[M, K] @ W[N, K].T``, tiles of [BLOCK_M, BLOCK_N] split over ``SPLIT`` ranges
of K, each program's float32 partial stored to a workspace; the last program of a tile to finish
(an acq_rel counter a tile, reset by that program) sums the partials in order and writes the tile.
One launch, deterministic. Each config is checked against float32 and timed in CUDA graphs
(medians, us a call); the best per shape printed beside cuBLAS, with GB/s over the weight bytes.
H200, 2026-12-03: cuBLAS was faster at every shape (0.60-0.95x; figures in
``aotcombo/builder/kernels/linear/recipe.py``), so these linears stay cuBLAS's. On a machine with a GPU:

    python3 benchmarks/skinny_gemm_probe.py
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from fused_linear_bench import time_graph  # CUDA-graph replays, median us a call

SHAPES = {  # name: (M, N, K)
    "1b q/k/v @128": (128, 3072, 2048), "1b o @128": (128, 2048, 2048), "1b gate/up @128": (128, 16384, 2048),
    "1b down @128": (128, 2048, 8192), "1b o @512": (512, 2048, 2048), "1b down @512": (512, 2048, 8192),
    "bert o @1024": (1024, 768, 768), "bert q/k/v @1024": (1024, 2304, 768),
}
CONFIGS = list(itertools.product((64, 128), (64, 128), (64, 128), (1, 2, 4, 8), (4,)))  # BM, BN, BK, SPLIT, stages


@triton.jit
def split_k_linear(x_ptr, w_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr):
    pid, split = tl.program_id(0), tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    pm, pn = pid // tiles_n, pid % tiles_n
    rm = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    k_per = K // SPLIT
    rk = split * k_per + tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_per, BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * K + (rk + k0)[None, :], mask=rm[:, None] < M, other=0.0)
        w = tl.load(w_ptr + rn[:, None] * K + (rk + k0)[None, :], mask=rn[:, None] < N, other=0.0)
        acc = tl.dot(a, tl.trans(w), acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT == 1:
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        tile = pid * SPLIT * BLOCK_M * BLOCK_N
        offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(part_ptr + tile + split * BLOCK_M * BLOCK_N + offs, acc)
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel")
        if arrived == SPLIT - 1:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in tl.static_range(SPLIT):
                total += tl.load(part_ptr + tile + s * BLOCK_M * BLOCK_N + offs, cache_modifier=".cg")
            tl.store(y_ptr + rm[:, None] * N + rn[None, :], total.to(y_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(count_ptr + pid, 0)


def ours(x, w, config):
    bm, bn, bk, split, stages = config
    (m, k), n = x.shape, w.shape[0]
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    part = torch.empty(tiles * split * bm * bn, device=x.device, dtype=torch.float32)
    count = torch.zeros(tiles, device=x.device, dtype=torch.int32)

    def run(_):
        split_k_linear[(tiles, split)](x, w, y, part, count, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                       SPLIT=split, num_warps=4 if bm * bn <= 64 * 64 else 8, num_stages=stages)
        return y

    return run


def main():
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    for name, (m, n, k) in SHAPES.items():
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        exact = x.float() @ w.float().T
        cublas = time_graph(lambda t: F.linear(*t), [(x, w)])
        best = None
        for config in CONFIGS:
            if k % (config[2] * config[3]):
                continue
            run = ours(x, w, config)
            try:
                got = run(None)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001 - a config that does not compile here (shared memory)
                print(f"  {name} {config}: {type(exc).__name__}")
                continue
            err = ((got.float() - exact).norm() / exact.norm()).item()
            if err > 1e-2:
                print(f"  {name} {config}: wrong, error {err:.2e}")
                continue
            us = time_graph(run, [None])
            if best is None or us < best[0]:
                best = (us, config, err)
        gb = n * k * 2 / 1e3
        line = f"{name:18} cuBLAS {cublas:7.2f} us ({gb / cublas:6.0f} GB/s)"
        if best:
            line += (f", ours {best[0]:7.2f} us ({gb / best[0]:6.0f} GB/s, {cublas / best[0]:.2f}x) "
                     f"BM,BN,BK,SPLIT,stages={best[1]} error {best[2]:.1e}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
