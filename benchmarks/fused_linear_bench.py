"""Fused linears (builder/fused_linears.py) against the kernels they replace, on the GPU.

    python3 benchmarks/fused_linear_bench.py [--out results.jsonl]

For each shape and pattern (a norm before the matmul, an activation or a residual add after
it), in one process:

- **unfused**: torch's kernels for the same ops (layer/RMS norm, cuBLAS matmul, GELU or add),
  as the package runs them when it does not fuse: one launch each;
- **fused**: our kernel, rendered by ``fused_linears.kernel_for`` with the build's tile rule
  and compiled here by Triton (the same source the build compiles to cubins).

Both are captured in CUDA graphs of 10 calls over 4 rotating input sets; each graph is
replayed 50 times, timed with CUDA events; the table gives medians per call in microseconds,
and the fastest of a few other tile configs (``CANDIDATES``) beside the rule's.
Each fused result is checked against float64 (relative L2; bf16 <= 1e-2, fp32 <= 1e-4) on
fresh random inputs. The crossover where cuBLAS's tuned kernels overtake our fixed tiles is
what ``fused_linears.FUSED_MAX_FLOPS`` is set from.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aotcombo.builder import fused_linears as fl, graph as g  # noqa: E402
from aotcombo.builder.inductor import KERNEL_PRELUDE  # noqa: E402

# (M, K, N, dtype, pattern): transformer shapes from ViT-tiny/GPT-2 (the zoo) up to large GEMMs
SHAPES = [
    # the zoo's: ViT-tiny, GPT-2, Qwen2, the Llama block, BERT, GPT-2 block (fp32)
    (34, 192, 576, "bfloat16", "layer"), (34, 192, 768, "bfloat16", "layer+gelu"), (34, 768, 192, "bfloat16", "residual"),
    (128, 128, 384, "bfloat16", "layer"), (128, 512, 128, "bfloat16", "residual"), (90, 128, 384, "float16", "rms"),
    (128, 256, 384, "float32", "rms"), (128, 256, 1376, "float32", "rms"), (64, 128, 512, "float32", "layer+gelu"),
    (256, 256, 1024, "float32", "layer+gelu"), (256, 1024, 256, "float32", "residual"),
    # between them and cuBLAS's ground: BERT-base widths at small batch, an LLM's decode step
    (64, 768, 768, "bfloat16", "layer"), (128, 768, 2304, "bfloat16", "layer"), (128, 768, 3072, "bfloat16", "layer+gelu"),
    (128, 3072, 768, "bfloat16", "residual"), (256, 768, 2304, "bfloat16", "layer"),
    (1, 1024, 1536, "bfloat16", "rms"), (8, 1024, 1536, "bfloat16", "rms"), (8, 1024, 5632, "bfloat16", "rms"),
    (8, 2816, 1024, "bfloat16", "residual"), (1024, 768, 3072, "bfloat16", "layer+gelu"),
]
SETS, CALLS, REPLAYS = 4, 10, 50
# Other tile configs timed beside the rule's: what the rule is checked against.
CANDIDATES = [fl.Tiles(16, 32, 64, 4, 3), fl.Tiles(16, 64, 64, 4, 3), fl.Tiles(32, 32, 64, 4, 3),
              fl.Tiles(32, 64, 64, 4, 3), fl.Tiles(64, 64, 64, 4, 3), fl.Tiles(64, 128, 64, 4, 3),
              fl.Tiles(16, 32, 128, 4, 3), fl.Tiles(16, 32, 64, 2, 3)]


def recipe(m, k, n, dtype, pattern) -> fl.Recipe:
    norm = "rms" if "rms" in pattern else "layer" if "layer" in pattern else None
    epilogue, extras = (), ()
    if "gelu" in pattern:
        epilogue = (("t0", "gelu", ("acc",)),)
    if "residual" in pattern:
        epilogue, extras = (("t0", "add", ("acc", "e0")),), ("full",)
    return fl.Recipe(m=m, n=n, k=k, weight_layout="nk", bias="row", glu=False, norm=norm, eps=1e-5,
                     norm_weight=norm is not None, norm_bias=norm == "layer", norm_cast=None, extras=extras,
                     epilogue=epilogue, result="t0" if epilogue else "acc", dtype=dtype, out_dtype=dtype)


def operands(r: fl.Recipe, device, seed: int) -> dict:
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, r.dtype)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    t = {"x": rand(r.m, r.k), "w": rand(r.n, r.k, scale=r.k ** -0.5), "bias": rand(r.n, scale=0.1)}
    if r.norm_weight:
        t["norm_weight"] = 1 + rand(r.k, scale=0.1)
    if r.norm_bias:
        t["norm_bias"] = rand(r.k, scale=0.1)
    if r.extras:
        t["e0"] = rand(r.m, r.n)
    t["out"] = torch.empty(r.m, r.n, dtype=dtype, device=device)
    return t


def reference(r: fl.Recipe, t: dict, dtype=None) -> torch.Tensor:
    """The unfused ops: torch's kernels (in ``dtype``: float64 for the check)."""
    cast = (lambda v: v.to(dtype)) if dtype else (lambda v: v)
    x = cast(t["x"])
    if r.norm == "layer":
        x = F.layer_norm(x, (r.k,), cast(t["norm_weight"]), cast(t["norm_bias"]), r.eps)
    elif r.norm == "rms":
        x = F.rms_norm(x, (r.k,), cast(t["norm_weight"]), r.eps)
    y = F.linear(x, cast(t["w"]), cast(t["bias"]))
    if "t0" in r.result:
        y = F.gelu(y) if r.epilogue[0][1] == "gelu" else y + cast(t["e0"])
    return y


def fused_kernel(r: fl.Recipe, t: dict, directory: Path, config: fl.Tiles | None = None):
    names = ["x", "w"] + [n for n in ("bias", "norm_weight", "norm_bias", "e0") if n in t]
    specs = {n: g.TensorSpec(tuple(t[n].shape), tuple(t[n].stride()), r.dtype) for n in names + ["out"]}
    op = g.Extern(op=f"{fl.OP}.default", args=(g.Ref("x"), g.Ref("w"), [g.Ref(n) for n in names[2:]], r.to_json()),
                  kwargs=(), out="out", writes=())
    kernel, args = fl.kernel_for(op, specs, config)
    path = directory / f"{kernel.name}.py"
    path.write_text("import triton\nimport triton.language as tl\n" + "\n".join(KERNEL_PRELUDE) + "\n\n" + kernel.source)
    spec = importlib.util.spec_from_file_location(kernel.name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, kernel.name)

    def launch(tensors):
        fn[kernel.grid](*(tensors[a.name] for a in args), **dict(kernel.tiles), num_warps=kernel.num_warps,
                        num_stages=kernel.num_stages)

    return launch, kernel


def time_graph(step, sets) -> float:
    """Median microseconds per call of ``step(tensors)``, from CUDA-graph replays."""
    for tensors in sets:
        step(tensors)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS):
            step(sets[i % len(sets)])
    times = []
    for _ in range(REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / CALLS)
    return statistics.median(times)


def best(others: dict) -> str:
    timed = {k: v for k, v in others.items() if isinstance(v, float)}
    return min(timed.items(), key=lambda kv: kv[1]) if timed else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.device("cuda")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n, dtype, pattern in SHAPES:
            r = recipe(m, k, n, dtype, pattern)
            sets = [operands(r, device, seed) for seed in range(SETS)]
            launch, kernel = fused_kernel(r, sets[0], Path(tmp))
            check = operands(r, device, 100)
            check["out"].fill_(float("nan"))
            launch(check)
            ref = reference(r, check, torch.float64)
            error = float((check["out"].double() - ref).norm() / ref.norm())
            unfused = time_graph(lambda t: t["out"].copy_(reference(r, t)), sets)
            fused = time_graph(launch, sets)
            others, errors = {}, {}
            if dtype == "float32":  # the rule's tiles with exact fp32 products instead of tf32x3
                chosen, fl.FP32_DOT_PRECISION = fl.FP32_DOT_PRECISION, "ieee"
                try:
                    ieee, _ = fused_kernel(r, sets[0], Path(tmp))
                finally:
                    fl.FP32_DOT_PRECISION = chosen
                check["out"].fill_(float("nan"))
                ieee(check)
                others["rule/ieee"] = round(time_graph(ieee, sets), 2)
                errors["rule/ieee"] = float((check["out"].double() - ref).norm() / ref.norm())
            for config in CANDIDATES:
                if dtype == "float32":
                    config = fl.Tiles(config.block_m, config.block_n, 32, config.num_warps, 2)
                if config == fl.tiles(m, n, k, dtype) or config.block_m > 2 * max(16, m):
                    continue
                other, _ = fused_kernel(r, sets[0], Path(tmp), config)
                try:
                    others[f"{config.block_m}x{config.block_n}x{config.block_k}/{config.num_warps}w"] = round(time_graph(other, sets), 2)
                except Exception as exc:  # noqa: BLE001 - a config that does not fit (shared memory)
                    others[f"{config.block_m}x{config.block_n}x{config.block_k}"] = type(exc).__name__
            flops = 2 * m * n * k
            row = {"m": m, "k": k, "n": n, "dtype": dtype, "pattern": pattern, "flops": flops,
                   "unfused_us": round(unfused, 2), "fused_us": round(fused, 2), "speedup": round(unfused / fused, 2),
                   "rel_error": error, "ok": error <= (1e-2 if dtype != "float32" else 1e-4),
                   "tiles": kernel.source.splitlines()[2].split("tiles ")[-1], "programs": kernel.grid[0],
                   "other_tiles_us": others, "other_errors": errors,
                   "device": torch.cuda.get_device_name()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\n{'M':>5} {'K':>5} {'N':>6} {'dtype':>8} {'pattern':>11} {'GFLOP':>7} {'unfused':>8} {'fused':>8} "
          f"{'ratio':>6} {'err':>8}")
    for r in rows:
        print(f"{r['m']:>5} {r['k']:>5} {r['n']:>6} {r['dtype']:>8} {r['pattern']:>11} {r['flops'] / 1e9:>7.3f} "
              f"{r['unfused_us']:>8.2f} {r['fused_us']:>8.2f} {r['speedup']:>5.2f}x {r['rel_error']:>8.1e}"
              + ("" if r["ok"] else "  WRONG") + f"  best other: {best(r['other_tiles_us'])}")


if __name__ == "__main__":
    main()
