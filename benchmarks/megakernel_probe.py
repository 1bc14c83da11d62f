#!/usr/bin/env python3
"""One persistent kernel against a launch a linear, for the weight reads of an LLM decode step.

The question (issue 27's int8 <= 0.60x and int4 <= 0.40x of bf16, at >= 70 % of copy bandwidth): a
Llama 3.2 1B decode step of ours launches about 100 kernels, and its short GEMVs (q/k/v, o) read at
under 1 TB/s; each launch costs its start, its ramp to full bandwidth and its tail, which a step of
fewer bytes (int8, int4) feels more. Persistent-megakernel designs run the whole step as one kernel
whose programs take tasks in turn and wait on counters for the tasks they depend on, asking for
their weights (which depend on nothing) before the wait. This probe times that mechanism alone, on
the 1B's 16 layers of linears (q/k/v 3072 x 2048, o 2048 x 2048, gate/up 2 x 8192 x 2048 with SiLU,
down 2048 x 8192; o and down add into the residual x; no attention, no norm: o reads q/k/v's first
2048 values), with the same task code in every variant:

- ``launches``: a kernel a linear (64 a step), a program a task, in a CUDA graph;
- ``launches_pdl``: the same, each launched while the one before runs (programmatic dependent
  launch), its first weights asked for before it waits on the GPU for that one;
- ``persistent``: one kernel of a program an SM (cooperative launch: all resident), each program
  taking tasks ``pid, pid + P, ...`` of a linear, asking for its first weights, then waiting until
  the linear before has counted all its tasks done (an acquire load of a counter a linear, zeroed
  by a memset before the kernel), then computing, storing and counting itself done (a barrier, then
  a release add). ``persistent2``: two programs an SM; ``persistent_plain``: one an SM, launched
  as any kernel (should a cooperative launch not be captured in a graph).

Weights bfloat16, int8 (a scale a row, applied after the sum) or int4 (a scale a group of 128), x
float32. Checked against torch (float32, relative L2 <= 1e-4) before timing: CUDA graphs of the step, medians of replays
(``fused_linear_bench.time_graph``), beside the copy bandwidth of the same run.

What it found (H100, torch 2.11, triton 3.6, 2026-12-05, copy 3000 GB/s, us a step of 16 layers; best tile
each): bf16 (1948 MB) launches 845 (77 % of copy), launches with PDL 718 (91 %), persistent 896 (73 %);
int8 (975 MB) 580 (56 %), PDL 528 (62 %), persistent 766 (42 %). One program an SM waiting on counters
loses to a launch a linear chained by PDL; two an SM do not fit the cooperative launch at 8 warps. The
lever it shows is the other one: PDL launches that ask for their whole task's weights (8 x 2048 here)
before the wait. (int4 read NaN at 16 layers on the GPU, in every variant: its random weights, not
looked into.)

    python3 benchmarks/megakernel_probe.py [--dtypes bfloat16,int8,int4] [--layers 16] [--out rows.jsonl]
    TRITON_INTERPRET=1 python3 benchmarks/megakernel_probe.py --check-only --layers 2 --scale 16   # no GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

D, FFN, QKV = 2048, 8192, 3072  # Llama 3.2 1B
STAGES = ("qkv", "o", "gate_up", "down")  # a layer's linears, in order


@triton.jit
def _products(w, x_row, s_row, k0, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BITS: tl.constexpr,
              GROUPS: tl.constexpr):
    """W's tile at k0 (``w``: [BLOCK_N, BLOCK_K] elements, int4: [BLOCK_N, BLOCK_K // 2] bytes of
    two nibbles, the low first) times x, float32, int4's group scales applied (128 k a group)."""
    if BITS == 4:
        kb = 2 * tl.arange(0, BLOCK_K // 2)[None, :]
        lo = (w & 15).to(tl.float32) - 8.0
        hi = (w >> 4).to(tl.float32) - 8.0
        products = lo * tl.load(x_row + k0 + kb) + hi * tl.load(x_row + k0 + kb + 1)
        return products * tl.load(s_row + (k0 + kb) // 128)
    else:
        return w.to(tl.float32) * tl.load(x_row + k0 + tl.arange(0, BLOCK_K)[None, :])


@triton.jit
def _task(w_ptr, s_ptr, x_ptr, y_ptr, tile, K: tl.constexpr, ROWS: tl.constexpr, GLU: tl.constexpr,
          RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BITS: tl.constexpr,
          wait_ptr, wait_for, PDL: tl.constexpr):
    """Rows ``tile * BLOCK_N ...`` of y = W x (GLU: silu(W[:ROWS] x) * W[ROWS:] x; RESIDUAL: y += W x),
    K along W's contiguous dim in BLOCK_K steps; int8 scaled a row, int4 a group. The first step's
    weights are asked for before the wait (``wait_ptr`` counting to ``wait_for``, or the PDL wait)."""
    PER_ROW: tl.constexpr = K // 2 if BITS == 4 else K  # W's elements a row
    STEP: tl.constexpr = BLOCK_K // 2 if BITS == 4 else BLOCK_K
    GROUPS: tl.constexpr = K // 128
    rows = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    w_rows = w_ptr + rows.to(tl.int64)[:, None] * PER_ROW + tl.arange(0, STEP)[None, :]
    x_row = x_ptr + rows[:, None] * 0  # x in W's layout: no exchange between threads
    s_row = s_ptr + rows[:, None] * GROUPS
    w = tl.load(w_rows)  # in its own dtype until used: half the registers of float32 (bf16)
    if GLU:
        w_up = tl.load(w_rows + ROWS * PER_ROW)
    if PDL:
        tl.extra.cuda.gdc_wait()
    if wait_for > 0:  # an acquire load (the L1 invalidated after it: x read below is fresh)
        while tl.atomic_add(wait_ptr, 0, sem="acquire", scope="gpu") < wait_for:
            pass
    acc = _products(w, x_row, s_row, 0, BLOCK_N, BLOCK_K, BITS, GROUPS)
    if GLU:
        acc_up = _products(w_up, x_row, s_row + ROWS * GROUPS, 0, BLOCK_N, BLOCK_K, BITS, GROUPS)
    for k0 in range(BLOCK_K, K, BLOCK_K):
        kw = k0 // 2 if BITS == 4 else k0
        acc += _products(tl.load(w_rows + kw), x_row, s_row, k0, BLOCK_N, BLOCK_K, BITS, GROUPS)
        if GLU:
            acc_up += _products(tl.load(w_rows + ROWS * PER_ROW + kw), x_row, s_row + ROWS * GROUPS, k0,
                                BLOCK_N, BLOCK_K, BITS, GROUPS)
    y = tl.sum(acc, 1)
    if BITS == 8:
        y = y * tl.load(s_ptr + rows)
    if GLU:
        up = tl.sum(acc_up, 1)
        if BITS == 8:
            up = up * tl.load(s_ptr + ROWS + rows)
        y = y / (1.0 + tl.exp(-y)) * up
    if RESIDUAL:
        y += tl.load(y_ptr + rows)
    tl.store(y_ptr + rows, y)


@triton.jit
def linear_kernel(w_ptr, s_ptr, x_ptr, y_ptr, K: tl.constexpr, ROWS: tl.constexpr, GLU: tl.constexpr,
                  RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BITS: tl.constexpr,
                  PDL: tl.constexpr):
    """A launch a linear: a program a task."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    STEP: tl.constexpr = BLOCK_K if BLOCK_K < K else K
    _task(w_ptr, s_ptr, x_ptr, y_ptr, tl.program_id(0), K, ROWS, GLU, RESIDUAL, BLOCK_N, STEP, BITS,
          x_ptr, 0, PDL)


@triton.jit
def _stage(w_ptr, s_ptr, x_ptr, y_ptr, count_ptr, index, pid, programs, K: tl.constexpr, ROWS: tl.constexpr,
           GLU: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           BITS: tl.constexpr, WAIT_FOR: tl.constexpr):
    """One linear's tasks in a persistent program: wait on linear ``index - 1``'s counter, count
    ``index``'s."""
    wait_for = tl.where(index > 0, WAIT_FOR, 0)  # the first linear waits for nothing
    STEP: tl.constexpr = BLOCK_K if BLOCK_K < K else K
    for tile in range(pid, ROWS // BLOCK_N, programs):
        _task(w_ptr, s_ptr, x_ptr, y_ptr, tile, K, ROWS, GLU, RESIDUAL, BLOCK_N, STEP, BITS,
              count_ptr + index - 1, wait_for, False)
        tl.debug_barrier()  # every thread's stores before the release
        tl.atomic_add(count_ptr + index, 1, sem="release", scope="gpu")


@triton.jit
def persistent_kernel(wqkv, sqkv, wo, so, wgu, sgu, wd, sd, x_ptr, t_ptr, h_ptr, count_ptr, layers,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BITS: tl.constexpr, D: tl.constexpr,
                      QKV: tl.constexpr, FFN: tl.constexpr):
    """The whole step: for each layer q/k/v, o, gate/up, down, each waiting for the one before."""
    pid, programs = tl.program_id(0), tl.num_programs(0)
    PACK: tl.constexpr = 2 if BITS == 4 else 1  # W's k a stored element
    ROW_SCALES: tl.constexpr = 128 if BITS == 4 else D  # int4: a scale a group of 128 k, else a row's
    for layer in range(layers):
        base = layer * 4
        _stage(wqkv + layer * QKV * D // PACK, sqkv + layer * QKV * D // ROW_SCALES, x_ptr, t_ptr, count_ptr, base,
               pid, programs, D, QKV, False, False, BLOCK_N, BLOCK_K, BITS, D // BLOCK_N)
        _stage(wo + layer * D * D // PACK, so + layer * D * D // ROW_SCALES, t_ptr, x_ptr, count_ptr, base + 1,
               pid, programs, D, D, False, True, BLOCK_N, BLOCK_K, BITS, QKV // BLOCK_N)
        _stage(wgu + layer * 2 * FFN * D // PACK, sgu + layer * 2 * FFN * D // ROW_SCALES, x_ptr, h_ptr, count_ptr,
               base + 2, pid, programs, D, FFN, True, False, BLOCK_N, BLOCK_K, BITS, D // BLOCK_N)
        _stage(wd + layer * D * FFN // PACK, sd + layer * D * FFN // (128 if BITS == 4 else FFN), h_ptr, x_ptr,
               count_ptr, base + 3, pid, programs, FFN, D, False, True, BLOCK_N, BLOCK_K, BITS, FFN // BLOCK_N)


def shapes(scale: int) -> dict:
    """Each linear's (rows, k, glu, residual), the 1B's sizes divided by ``scale``."""
    d, ffn, qkv = D // scale, FFN // scale, QKV // scale
    return {"qkv": (qkv, d, False, False), "o": (d, d, False, True), "gate_up": (ffn, d, True, False),
            "down": (d, ffn, False, True)}


def make_weights(layers: int, dtype: str, scale: int, device) -> dict:
    """Random weights a linear (all layers in one tensor) and their scales: int8 a row, int4 a
    group of 128 k (two nibbles a byte, the low first, 8 their zero), bfloat16 ones."""
    gen = torch.Generator(device=device).manual_seed(0)
    out = {}
    for name, (rows, k, glu, _) in shapes(scale).items():
        n = rows * (2 if glu else 1)
        if dtype == "int4":
            w = torch.randint(0, 256, (layers, n, k // 2), device=device, dtype=torch.uint8, generator=gen)
            s = torch.rand(layers, n, k // 128, device=device, generator=gen) * 0.5 / (8 * k ** 0.5) + 1e-4
        elif dtype == "int8":
            w = torch.randint(-127, 128, (layers, n, k), device=device, dtype=torch.int8, generator=gen)
            s = torch.rand(layers, n, device=device, generator=gen) * 0.5 / (127 * k ** 0.5) + 1e-4
        else:
            w = (torch.randn(layers, n, k, device=device, generator=gen) * 0.5 / k ** 0.5).to(torch.bfloat16)
            s = torch.ones(layers, n, device=device)
        out[name] = (w, s)
    return out


def dequantized(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """One layer's weight in float32."""
    if w.dtype != torch.uint8:
        return w.float() * s[:, None]
    nibbles = torch.stack([(w & 15), (w >> 4)], -1).flatten(-2).float() - 8.0
    return nibbles * s.repeat_interleave(128, -1)


def reference(weights: dict, x0: torch.Tensor, layers: int, scale: int) -> torch.Tensor:
    """The step in torch, float32."""
    x, f = x0.clone(), shapes(scale)["gate_up"][0]
    for layer in range(layers):
        def lin(name):
            w, s = weights[name]
            return lambda v: dequantized(w[layer], s[layer]) @ v
        t = lin("qkv")(x)
        x = x + lin("o")(t[:x.numel()])
        gu = lin("gate_up")(x)
        x = x + lin("down")(torch.nn.functional.silu(gu[:f]) * gu[f:])
    return x


class Step:
    """The buffers of one step and its variants' launches."""

    def __init__(self, weights, layers, scale, block_n, block_k, warps, device):
        self.w, self.layers, self.scale = weights, layers, scale
        self.block_n, self.block_k, self.warps = block_n, block_k, warps
        d, ffn, qkv = D // scale, FFN // scale, QKV // scale
        self.x, self.t, self.h = (torch.zeros(n, device=device) for n in (d, qkv, ffn))
        self.count = torch.zeros(4 * layers, device=device, dtype=torch.int32)
        self.bits = {torch.uint8: 4, torch.int8: 8}.get(weights["qkv"][0].dtype, 16)
        self.programs = 1 if os.environ.get("TRITON_INTERPRET") == "1" else \
            torch.cuda.get_device_properties(device).multi_processor_count

    def launches(self, pdl: bool = False) -> None:
        buffers = {"qkv": (self.x, self.t), "o": (self.t, self.x), "gate_up": (self.x, self.h),
                   "down": (self.h, self.x)}
        extra = {"launch_pdl": True} if pdl else {}
        for layer in range(self.layers):
            for name, (rows, k, glu, residual) in shapes(self.scale).items():
                w, s = self.w[name]
                src, dst = buffers[name]
                linear_kernel[(rows // self.block_n,)](w[layer], s[layer], src, dst, k, rows, glu, residual,
                                                       self.block_n, self.block_k, self.bits, pdl,
                                                       num_warps=self.warps, **extra)

    def persistent(self, per_sm: int = 1, cooperative: bool = True) -> None:
        self.count.zero_()
        args = [t for name in STAGES for t in self.w[name]]
        extra = {"launch_cooperative_grid": True} if cooperative and self.programs > 1 else {}
        d, ffn, qkv = D // self.scale, FFN // self.scale, QKV // self.scale
        persistent_kernel[(self.programs * per_sm,)](*args, self.x, self.t, self.h, self.count, self.layers,
                                                     self.block_n, self.block_k, self.bits, d, qkv, ffn,
                                                     num_warps=self.warps, **extra)

    def run(self, variant: str, x0: torch.Tensor) -> torch.Tensor:
        self.x.copy_(x0)
        {"launches": self.launches, "launches_pdl": lambda: self.launches(pdl=True),
         "persistent": self.persistent, "persistent2": lambda: self.persistent(2),
         "persistent_plain": lambda: self.persistent(cooperative=False)}[variant]()
        return self.x.clone()


VARIANTS = ("launches", "launches_pdl", "persistent", "persistent2", "persistent_plain")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="bfloat16,int8,int4")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--scale", type=int, default=1, help="the 1B's sizes divided by this (the interpreter's check)")
    parser.add_argument("--tiles", default="8x512w4,8x2048w8,16x1024w8,16x2048w16,4x2048w4",
                        help="BLOCK_N x BLOCK_K (capped at each linear's k) w warps, comma separated")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--check-only", action="store_true", help="compare with torch, no timing")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    device = torch.device("cpu" if interpret else "cuda")
    gpu_only = ("launches_pdl", "persistent2", "persistent_plain")  # the interpreter runs one program at a time
    variants = [v for v in args.variants.split(",") if not (interpret and v in gpu_only)]
    rows = []
    if not interpret:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from fused_linear_bench import time_graph

        from aotcombo.testing.timing import copy_bandwidth
        copy = copy_bandwidth(device, 1 << 30, 20, 100)["GBps"]
        print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, f"copy {copy:.0f} GB/s", flush=True)
    for dtype in args.dtypes.split(","):
        weights = make_weights(args.layers, dtype, args.scale, device)
        nbytes = sum(w.numel() * w.element_size() + s.numel() * 4 for w, s in weights.values())
        x0 = torch.randn(D // args.scale, device=device, generator=torch.Generator(device=device).manual_seed(1))
        ref = reference(weights, x0, args.layers, args.scale)
        for tile in args.tiles.split(","):
            sizes, warps = tile.split("w")
            block_n, block_k = map(int, sizes.split("x"))
            step = Step(weights, args.layers, args.scale, block_n, block_k, int(warps), device)
            row = {"dtype": dtype, "tile": tile, "layers": args.layers, "MB": round(nbytes / 1e6, 1)}
            for variant in variants:
                try:
                    error = ((step.run(variant, x0) - ref).norm() / ref.norm()).item()
                    if not error <= 1e-4:
                        row[variant] = f"WRONG {error:.1e}"
                        continue
                    if args.check_only:
                        row[variant] = f"ok {error:.1e}"
                        continue
                    us = time_graph(lambda _, v=variant: step.run(v, x0), [None])
                    row[variant] = round(us, 1)
                    row[variant + "_pct_copy"] = round(100 * nbytes / (us * 1e-6) / (copy * 1e9), 1)
                except Exception as exc:  # noqa: BLE001 - a variant that does not compile or launch
                    row[variant] = f"{type(exc).__name__}: {str(exc)[:200]}"
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
