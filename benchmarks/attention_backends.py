#!/usr/bin/env python3
"""Which fused attention a dynamic package should let torch pick: cuDNN's against the
memory-efficient kernel, at BERT-base's attention (12 heads of 64, fp16, an additive padding
mask [batch, 1, 1, seq]) for the (batch, seq) shapes ``axes_bench.py`` times, one GPU, one run.

    PYTHONUNBUFFERED=1 python3 benchmarks/attention_backends.py --out $OUT

Per shape and backend: the first call in the process (cuDNN builds an execution plan per
shape, the memory-efficient kernel has none to build), then the median of ``--calls`` calls
(CUDA events around each, after a warm-up). JSON lines to ``$OUT/attention_backends.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from aotcombo.testing.timing import gpu_us  # noqa: E402

SHAPES = ((1, 7), (1, 128), (2, 77), (4, 129), (8, 128), (8, 383), (16, 256), (32, 512))
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def operands(batch: int, seq: int):
    q, k, v = (torch.randn(batch, 12, seq, 64, dtype=torch.float16, device="cuda") for _ in range(3))
    mask = torch.zeros(batch, 1, 1, seq, dtype=torch.float16, device="cuda")
    mask[1:, ..., seq // 2:] = torch.finfo(torch.float16).min  # rows after the first padded
    return q, k, v, mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for batch, seq in SHAPES:
        q, k, v, mask = operands(batch, seq)
        row = {"batch": batch, "seq": seq}
        for name, backend in BACKENDS.items():
            with sdpa_kernel([backend]):
                def call():
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

                torch.cuda.synchronize()
                start = time.perf_counter()
                call()
                torch.cuda.synchronize()
                row[f"{name}_first_ms"] = round((time.perf_counter() - start) * 1e3, 3)
                gpu_us(call, 10)
                row[f"{name}_us"] = round(gpu_us(call, args.calls), 2)
        row["cudnn/efficient"] = round(row["cudnn_us"] / row["efficient_us"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(Path(args.out) / "attention_backends.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
