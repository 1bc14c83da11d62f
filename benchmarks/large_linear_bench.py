"""Linears of many rows (full-size models: BERT, ViT, GPT-2, a prefill) with their epilogue
fused in our kernel, against cuBLAS and torch's epilogue kernel, on the GPU.

    python3 benchmarks/large_linear_bench.py [--out results.jsonl] [--only bert_1024 ...]

For each shape (rows M, K, N from the full-size models at their benchmark batch, and BERT-base
at 32 x 512 tokens) and pattern (``gelu``: bias then GELU; ``layer+gelu``: a layer norm first;
``bias``: the bias alone, the matmul's quality by itself), in one process:

- **cuBLAS**: ``F.linear(x, W, bias)`` alone (what the package runs for the matmul);
- **unfused**: the pattern's torch kernels (norm, cuBLAS, GELU), and the same through
  ``torch.compile`` (**Inductor**: its norm and GELU kernels, cuBLAS between): the package's
  launches when it does not fuse;
- **ours**: ``kernels/linear/lowering.kernel_for`` with the tile rule's config, and each of
  ``CANDIDATES`` (block_m, block_n, block_k, warps, stages), compiled here by Triton.

Timing and checks as ``fused_linear_bench.py`` (CUDA graphs of 10 calls over 4 input sets,
medians of 50 replays; each kernel checked against float64 on fresh random inputs, relative L2
<= 1e-2). The table gives microseconds, cuBLAS's TFLOP/s, and the best config against
Inductor's: what ``recipe.FUSED_MAX_FLOPS`` (cuBLAS keeps the large linears) is set from.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fused_linear_bench import fused_kernel, operands, recipe, reference, time_graph  # noqa: E402

from aotcombo.builder.kernels.linear.recipe import Tiles, tiles  # noqa: E402
from aotcombo.testing.compare import relative_error  # noqa: E402

# name: (M, K, N, dtype, pattern)
SHAPES = {
    "bert_1024_up": (1024, 768, 3072, "float16", "gelu"),
    "bert_1024_qkv": (1024, 768, 2304, "float16", "bias"),
    "bert_1024_down": (1024, 3072, 768, "float16", "bias"),
    "bert_4096_up": (4096, 768, 3072, "float16", "gelu"),
    "bert_16384_up": (16384, 768, 3072, "float16", "gelu"),
    "bert_16384_qkv": (16384, 768, 2304, "float16", "bias"),
    "bert_16384_down": (16384, 3072, 768, "float16", "bias"),
    "vit_1576_up": (1576, 768, 3072, "float16", "layer+gelu"),
    "vit_1576_up_bare": (1576, 768, 3072, "float16", "gelu"),
    "vit_1576_qkv": (1576, 768, 2304, "float16", "layer"),
    "gpt2_1024_up": (1024, 768, 3072, "bfloat16", "layer+gelu"),
    "llama1b_128_qkv": (128, 2048, 3072, "bfloat16", "rms"),
    "bert_128_up": (128, 768, 3072, "float16", "gelu"),
    "bert_512_up": (512, 768, 3072, "float16", "gelu"),
}
CANDIDATES = [Tiles(*c) for c in (
    (64, 64, 64, 4, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3),
    (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (64, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 32, 4, 4),
    (64, 128, 32, 4, 5), (128, 64, 32, 4, 5))]


def run(names: list[str], out: Path | None) -> None:
    device, rows = torch.device("cuda"), []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            m, k, n, dtype, pattern = SHAPES[name]
            r = recipe(m, k, n, dtype, pattern)
            sets = [operands(r, device, seed) for seed in range(4)]
            check = operands(r, device, 100)
            ref = reference(r, check, torch.float64)
            unfused = time_graph(lambda t: reference(r, t), sets)
            torch.compiler.reset()  # a compile per shape, none falling back to eager past the recompile limit
            inductor = torch.compile(lambda t: reference(r, t), dynamic=False)
            inductor_us = time_graph(inductor, sets)
            cublas = time_graph(lambda t: F.linear(t["x"], t["w"], t["bias"]), sets)
            rule = tiles(m, n, k, dtype)
            timed = {}
            for config in [rule] + [c for c in CANDIDATES if c != rule]:
                label = f"{config.block_m}x{config.block_n}x{config.block_k}/{config.num_warps}w{config.num_stages}s"
                try:
                    launch, _ = fused_kernel(r, sets[0], Path(tmp), config)
                    check["out"].fill_(float("nan"))
                    launch(check)
                    error = relative_error(check["out"], ref)
                    timed[label] = round(time_graph(launch, sets), 2) if error <= 1e-2 else f"WRONG {error:.1e}"
                except Exception as exc:  # noqa: BLE001 - a config that does not fit (shared memory)
                    timed[label] = type(exc).__name__
            numbers = {k: v for k, v in timed.items() if isinstance(v, float)}
            best = min(numbers, key=numbers.get) if numbers else None
            flops = 2 * m * n * k
            row = {"name": name, "m": m, "k": k, "n": n, "dtype": dtype, "pattern": pattern,
                   "cublas_us": round(cublas, 2), "cublas_tflops": round(flops / cublas / 1e6, 1),
                   "unfused_us": round(unfused, 2), "inductor_us": round(inductor_us, 2),
                   "rule": next(iter(timed)), "rule_us": timed[next(iter(timed))],
                   "best": best, "best_us": numbers.get(best), "configs_us": timed,
                   "device": torch.cuda.get_device_name()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\n{'shape':>18} {'pattern':>10} {'cuBLAS':>7} {'TFLOP/s':>7} {'unfused':>8} {'Inductor':>8} {'rule':>8} "
          f"{'best':>8} {'Inductor/best':>13}  best config")
    for r in rows:
        rule = r["rule_us"] if isinstance(r["rule_us"], float) else float("nan")
        best = r["best_us"] or float("nan")
        print(f"{r['name']:>18} {r['pattern']:>10} {r['cublas_us']:>7.2f} {r['cublas_tflops']:>7.1f} "
              f"{r['unfused_us']:>8.2f} {r['inductor_us']:>8.2f} {rule:>8.2f} {best:>8.2f} "
              f"{r['inductor_us'] / best:>12.2f}x  {r['best']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the rows as JSON lines here")
    parser.add_argument("--only", nargs="*", choices=sorted(SHAPES), help="these shapes only (default: all)")
    args = parser.parse_args()
    run(args.only or list(SHAPES), args.out)


if __name__ == "__main__":
    main()
