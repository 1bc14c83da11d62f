#!/usr/bin/env python3
"""Does a linear's weight layout matter to cuBLAS? GPT-2's ``Conv1D`` stores W as [k, n] (``x @ W``),
``nn.Linear`` as [n, k] (``x @ W.t()``). For d768's four linears (q/k/v, o, up with GELU's tanh form in
cuBLASLt's epilogue, as the package runs GPT-2's, down) at 128-8192 rows, in bf16 and fp16: torch's
``addmm`` / ``_addmm_activation`` with each layout, CUDA graphs of 20 calls, the best of two medians, us a
call, and the ratio [k, n] / [n, k]. On a machine with a GPU:

    python3 benchmarks/weight_layout_probe.py

H100, torch 2.11, 2026-12-06, a layer's four (us, [k, n] / [n, k]): bf16 128 rows 20.8 / 20.9, 256 23.5 /
22.5, 512 28.9 / 27.4, 1024 39.2 / 37.5, 2048 59.0 / 57.0, 4096 99.2 / 99.6, 8192 192.3 / 198.0; fp16
21.2 / 21.1, 24.5 / 22.8, 29.3 / 28.0, 39.4 / 38.2, 59.5 / 58.1, 101.6 / 103.0, 196.7 / 209.5.

Tried, not kept (5eee065, reverted): a [k, n] weight of a 16-bit product of 256-2048 rows stored [n, k] by a
copy made at load (``plan/at_load.py``). Full-size GPT-2 at 4 x 256 tokens (its 1024-row GEMMs through
``runtime/cublaslt.py``, no workspace), a CUDA-graph replay after 10 ms of rest, before / after, two runs:
773 / 765 and 781 / 767 us (its q/k/v GEMMs 112.3 -> 106.0 us a call, the others unchanged); calls back to
back moved within the host's noise. The copies stay on the GPU beside the packaged weights, which a device
keeps for every load: GPT-2 small's 170 MB more, +68 % of its weights, for about 1 %.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import torch  # noqa: E402

from fused_linear_bench import time_graph  # noqa: E402

SHAPES = {"qkv": (2304, 768), "o": (768, 768), "up": (3072, 768), "down": (768, 3072)}  # (n, k)
ROWS = (128, 256, 512, 1024, 2048, 4096, 8192)


def product(name: str, bias, x, mat2, out):
    if name == "up":
        return lambda _: torch._addmm_activation(bias, x, mat2, use_gelu=True)
    return lambda _: torch.addmm(bias, x, mat2, out=out)


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for dtype in (torch.bfloat16, torch.float16):
        for m in ROWS:
            cells, total = [], {"kn": 0.0, "nk": 0.0}
            for name, (n, k) in SHAPES.items():
                x = torch.randn(m, k, device="cuda", dtype=dtype)
                w_nk = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
                bias = torch.randn(n, device="cuda", dtype=dtype)
                out = torch.empty(m, n, device="cuda", dtype=dtype)
                us = {layout: min(time_graph(product(name, bias, x, mat2, out), [()]) for _ in range(2))
                      for layout, mat2 in (("kn", w_nk.t().contiguous()), ("nk", w_nk.t()))}
                cells.append(f"{name} {us['kn']:6.2f} / {us['nk']:6.2f}")
                total = {layout: total[layout] + us[layout] for layout in total}
            print(f"{str(dtype).removeprefix('torch.'):8} {m:5} rows  " + "  ".join(cells) +
                  f"  | layer {total['kn']:6.1f} / {total['nk']:6.1f} ({total['kn'] / total['nk']:.3f})", flush=True)


if __name__ == "__main__":
    main()
