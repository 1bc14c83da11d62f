#!/usr/bin/env python3
"""How fast this GPU can read memory: the ceiling for a decode step, which reads every weight
once and writes almost nothing. Beside the copy bandwidth the LLM benchmarks divide by (read +
write), three readers of a ``--gib`` GiB bf16 tensor: ``torch.sum``, cuBLAS's GEMV (``x @ W.T``
for one row, W the whole tensor as [N, 4096]), and a Triton kernel that only reads (each program
sums its slice, 16 bytes a load, several grids, the best kept). Medians of ``do_bench``.

    python3 benchmarks/read_bandwidth.py [--gib 4] [--out DIR]

A step that reads B bytes cannot take less than B over the best read rate printed here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from aotcombo.testing.timing import copy_bandwidth, do_bench_ms  # noqa: E402


@triton.jit
def _read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for offset in range(start, n, step):
        idx = offset + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, 0))


def triton_read(x: torch.Tensor, programs: int, block: int, warps: int):
    out = torch.empty(programs, device=x.device, dtype=torch.float32)
    return lambda: _read[(programs,)](x, out, x.numel(), BLOCK=block, num_warps=warps)


def rate(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    device = torch.device("cuda")
    nbytes = int(args.gib * 2**30)
    x = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
    rows = {"device": torch.cuda.get_device_name(), "bytes": nbytes,
            "copy_GBps": copy_bandwidth(device, nbytes // 2, 200, 1000)["GBps"]}
    rows["torch_sum_GBps"] = rate(nbytes, do_bench_ms(lambda: x.sum(dtype=torch.float32), [()], 200, 1000))
    w = x.view(-1, 4096)
    v = torch.randn(1, 4096, dtype=torch.bfloat16, device=device)
    rows["cublas_gemv_GBps"] = rate(nbytes, do_bench_ms(lambda: v @ w.T, [()], 200, 1000))
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    best = {}
    for per_sm in (1, 2, 4, 8):
        for block, warps in ((2048, 4), (4096, 8), (8192, 8)):
            fn = triton_read(x, sms * per_sm, block, warps)
            best[f"{per_sm}x{sms} programs, {block}/{warps}"] = rate(nbytes, do_bench_ms(fn, [()], 200, 1000))
    rows["triton_read_GBps"] = best
    rows["best_read_GBps"] = max([rows["torch_sum_GBps"], rows["cublas_gemv_GBps"], *best.values()])
    print(json.dumps(rows, indent=1))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "read_bandwidth.json", "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
