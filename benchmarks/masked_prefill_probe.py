#!/usr/bin/env python3
"""Where could a masked prefill's attention go faster? The package's kernel (``templates/prefill_attention.py.j2``:
bool key mask, sizes at run time, a first pass in every program finding its batch's visible keys) against:

- ``ranges``: each batch's visible key range found once per call by a small kernel (``key_ranges``, one program),
  every attention program reading its two ints instead of scanning the mask;
- ``longest first``: those ranges, and the batches taken longest first (a permutation from the same kernel), so
  that the grid's last programs are its shortest;
- ``flash``: torch's flash attention (``aten._flash_attention_forward``, varlen, ``seqused_k``: a batch's keys as
  a prefix of its row), which reads only the visible keys as well.

BERT-base's attention (12 heads of 64, fp16, q/k/v views of the fused QKV linear's output) at 32 x 512, 16 x 256,
8 x 383 and 8 x 128 tokens, batches after the first padded to random lengths as ``axes_bench.py`` draws them.
Each variant checked against SDPA in float32 (max abs error), then timed as a CUDA graph of 12 calls (a forward's
layers) over 4 input sets, medians of 100 replays, two rounds.

    python3 benchmarks/masked_prefill_probe.py
    TRITON_INTERPRET=1 python3 benchmarks/masked_prefill_probe.py --check    # CPU, tiny shapes

H100, torch 2.11, 2026-12-06, us a call, round 2 (as built / ranges / longest first / flash; the ranges kernel,
once a call): 32 x 512 70.5 / 74.7 / 69.5 / 86.3 (3.8); 16 x 256 16.9 / 19.0 / 18.4 / 21.0 (2.2); 8 x 383 19.3 /
21.3 / 21.2 / 20.7 (5.5); 8 x 128 6.0 / 6.4 / 6.6 / 7.0 (1.9); every error 5e-4 to 1.3e-3. None pays: the
package's kernel stays as it is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_linear_bench import time_graph  # noqa: E402

HEADS, HEAD_DIM, BLOCK_M, BLOCK_N = 12, 64, 128, 32
SCAN, RANGES, LONGEST_FIRST = 0, 1, 2


@triton.jit
def attention(q_ptr, k_ptr, v_ptr, mask_ptr, ranges_ptr, order_ptr, out_ptr, rows, keys, heads,
              sq0, sq1, sq2, so0, so1, so2, sm0, scale_log2,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MODE: tl.constexpr):
    """The template's kernel (a bool key mask, q/k/v sharing strides); MODE: SCAN (as built), RANGES, LONGEST_FIRST."""
    pid = tl.program_id(0)
    row_blocks = (rows + BLOCK_M - 1) // BLOCK_M
    bh = pid // row_blocks
    if MODE == 2:
        b = tl.load(order_ptr + bh // heads).to(tl.int64)
    else:
        b = (bh // heads).to(tl.int64)
    h = bh % heads
    rm = pid % row_blocks * BLOCK_M + tl.arange(0, BLOCK_M)
    rn0 = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    rows_ok = rm < rows
    q = tl.load(q_ptr + b * sq0 + h * sq1 + rm[:, None] * sq2 + rd[None, :], mask=rows_ok[:, None], other=0.0)
    k_base = k_ptr + b * sq0 + h * sq1
    v_base = v_ptr + b * sq0 + h * sq1
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    mask_row = mask_ptr + b * sm0
    if MODE == 0:
        first, last = keys, -1
        for start in range(0, keys, BLOCK_N):
            rn = start + rn0
            seen = tl.load(mask_row + rn, mask=rn < keys, other=0) != 0
            first = tl.minimum(first, tl.min(tl.where(seen, rn, keys), 0))
            last = tl.maximum(last, tl.max(tl.where(seen, rn, -1), 0))
        lo, hi = first // BLOCK_N * BLOCK_N, last + 1
    else:
        lo = tl.load(ranges_ptr + 2 * b)
        hi = tl.load(ranges_ptr + 2 * b + 1)
    for start in range(lo, hi, BLOCK_N):
        rn = start + rn0
        keys_ok = rn < hi
        k = tl.load(k_base + rn[:, None] * sq2 + rd[None, :], mask=keys_ok[:, None], other=0.0)
        v = tl.load(v_base + rn[:, None] * sq2 + rd[None, :], mask=keys_ok[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        allowed = tl.load(mask_row + rn, mask=keys_ok, other=0) != 0
        scores = qk * scale_log2 + tl.where(allowed, 0.0, float("-inf"))[None, :]
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(scores - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(out_ptr + b * so0 + h * so1 + rm[:, None] * so2 + rd[None, :], out.to(tl.float16), mask=rows_ok[:, None])


@triton.jit
def key_ranges(mask_ptr, ranges_ptr, order_ptr, batch, keys, sm0, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """One program: each batch's [first visible key's block, last visible key + 1), and the batches by the
    length of that range, longest first (ties by index)."""
    rb = tl.arange(0, BLOCK_B)
    rk = tl.arange(0, BLOCK_K)
    first = tl.full([BLOCK_B], 1 << 30, tl.int32)
    last = tl.full([BLOCK_B], -1, tl.int32)
    for start in range(0, keys, BLOCK_K):
        kk = start + rk
        seen = tl.load(mask_ptr + rb[:, None] * sm0 + kk[None, :], mask=(rb[:, None] < batch) & (kk[None, :] < keys),
                       other=0) != 0
        first = tl.minimum(first, tl.min(tl.where(seen, kk[None, :], 1 << 30), 1))
        last = tl.maximum(last, tl.max(tl.where(seen, kk[None, :], -1), 1))
    lo = tl.where(last >= 0, first // BLOCK_N * BLOCK_N, 0)
    hi = last + 1
    tl.store(ranges_ptr + 2 * rb, lo, mask=rb < batch)
    tl.store(ranges_ptr + 2 * rb + 1, hi, mask=rb < batch)
    n = tl.where(rb < batch, hi - lo, -1)
    before = (n[None, :] > n[:, None]) | ((n[None, :] == n[:, None]) & (rb[None, :] < rb[:, None]))
    tl.store(order_ptr + tl.sum(before.to(tl.int32), 1), rb, mask=rb < batch)


def input_sets(batch: int, seq: int, device: str) -> list[dict]:
    sets = []
    for seed in (401, 402, 403, 404):
        g = torch.Generator().manual_seed(seed * 7919 + batch * 1000 + seq)
        mask = torch.ones(batch, seq, dtype=torch.bool)
        for b in range(1, batch):
            mask[b, int(torch.randint(1, seq + 1, (1,), generator=g)):] = False
        qkv = torch.randn(batch, seq, 3, HEADS, HEAD_DIM, generator=g).half().to(device)
        t = {"mask": mask.to(device), "qkv": qkv, "lens": mask.sum(1).to(torch.int32).to(device),
             "cu": torch.arange(0, (batch + 1) * seq, seq, dtype=torch.int32, device=device),
             "out": torch.empty(batch, seq, HEADS, HEAD_DIM, dtype=torch.half, device=device),
             "ranges": torch.empty(batch, 2, dtype=torch.int32, device=device),
             "order": torch.empty(batch, dtype=torch.int32, device=device)}
        t["q"], t["k"], t["v"] = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        sets.append(t)
    return sets


def ranges(t: dict) -> None:
    batch, seq = t["mask"].shape
    key_ranges[(1,)](t["mask"], t["ranges"], t["order"], batch, seq, seq, BLOCK_B=triton.next_power_of_2(batch),
                     BLOCK_K=128, BLOCK_N=BLOCK_N, num_warps=4)


def ours(t: dict, mode: int) -> torch.Tensor:
    (batch, heads, seq, _), q, out = t["q"].shape, t["q"], t["out"]
    grid = batch * heads * triton.cdiv(seq, BLOCK_M)
    attention[(grid,)](q, t["k"], t["v"], t["mask"], t["ranges"], t["order"], out, seq, seq, heads,
                       *q.stride()[:3], out.stride(0), out.stride(2), out.stride(1), seq,
                       HEAD_DIM ** -0.5 * 1.4426950408889634, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=HEAD_DIM,
                       MODE=mode, num_warps=4, num_stages=3)
    return out


def flash(t: dict) -> torch.Tensor:
    batch, seq = t["mask"].shape
    qkv = t["qkv"].view(batch * seq, 3, HEADS, HEAD_DIM)
    return torch.ops.aten._flash_attention_forward(
        qkv[:, 0], qkv[:, 1], qkv[:, 2], t["cu"], t["cu"], seq, seq, 0.0, False, False, scale=HEAD_DIM ** -0.5,
        seqused_k=t["lens"])[0].view(batch, seq, HEADS, HEAD_DIM)


VARIANTS = {"as built": lambda t: ours(t, SCAN), "ranges": lambda t: ours(t, RANGES),
            "longest first": lambda t: ours(t, LONGEST_FIRST), "flash": flash}


def check(sets: list[dict], variants: dict) -> dict:
    """Max abs error of each variant against SDPA in float32 on the first input set (ranges made first)."""
    t = sets[0]
    ranges(t)
    lens = t["mask"].sum(1).tolist()
    order = t["order"].tolist()
    assert sorted(order) == list(range(len(order))), order
    assert all(lens[a] >= lens[b] for a, b in zip(order, order[1:])), (order, lens)
    ref = torch.nn.functional.scaled_dot_product_attention(
        t["q"].float(), t["k"].float(), t["v"].float(), attn_mask=t["mask"][:, None, None, :]).transpose(1, 2)
    errors = {}
    for name, fn in variants.items():
        t["out"].fill_(float("nan"))
        errors[name] = (fn(t).float() - ref).abs().max().item()
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="tiny shapes, errors only (TRITON_INTERPRET=1 on a CPU)")
    args = parser.parse_args()
    if args.check:
        errors = check(input_sets(5, 70, "cpu"), {k: v for k, v in VARIANTS.items() if k != "flash"})
        print(errors)
        raise SystemExit(0 if all(e < 2e-3 for e in errors.values()) else 1)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for batch, seq in ((32, 512), (16, 256), (8, 383), (8, 128)):
        sets = input_sets(batch, seq, "cuda")
        errors = check(sets, VARIANTS)
        print(f"{batch} x {seq}: max abs error " + "  ".join(f"{k} {v:.1e}" for k, v in errors.items()), flush=True)
        for round_ in (1, 2):
            for t in sets:  # every set's ranges, for the variants that read them
                ranges(t)
            timed = {name: time_graph(fn, sets, 12, 100) for name, fn in VARIANTS.items()}
            timed["ranges kernel"] = time_graph(ranges, sets, 12, 100)
            print(f"  round {round_}, us a call: " + "  ".join(f"{k} {v:.1f}" for k, v in timed.items()), flush=True)


if __name__ == "__main__":
    main()
