"""Fused linears (builder/fused_linears.py) against the kernels they replace, on the GPU.

    python3 benchmarks/fused_linear_bench.py [--out results.jsonl] [--decode]

For each shape and pattern (a norm before the matmul, an activation or a residual add after
it), in one process:

- **unfused**: torch's kernels for the same ops (layer/RMS norm, cuBLAS matmul, GELU or add),
  as the package runs them when it does not fuse: one launch each;
- **fused**: our kernel, rendered by ``fused_linear_kernels.kernel_for`` with the build's tile rule
  and compiled here by Triton (the same source the build compiles to cubins).

Both are captured in CUDA graphs of 10 calls over 4 rotating input sets; each graph is
replayed 50 times, timed with CUDA events; the table gives medians per call in microseconds,
and the fastest of a few other tile configs (``CANDIDATES``) beside the rule's.
Each fused result is checked against float64 (relative L2; bf16 <= 1e-2, fp32 <= 1e-4) on
fresh random inputs. The crossover where cuBLAS's tuned kernels overtake our fixed tiles is
what ``fused_linears.FUSED_MAX_FLOPS`` is set from.

``--decode [--rows 1,8]``: the linears of ``sample_models/llm_decode.py``'s decode step (its
RMS norm -> q/k/v and -> lm head, o and down with the residual as addmm's C, RMS norm ->
gate/up -> silu(gate) * up) at a few rows, where the rule makes GEMVs (``GEMV_MAX_ROWS``): each
against cuBLAS's matmul alone (``torch.addmm``/``F.linear``: what the package ran before,
the norm and epilogue kernels not counted) and the unfused ops, with the tile configs of
``GEMV_CANDIDATES`` (one row) or ``DOT_CANDIDATES`` beside the rule's, and the weight bytes
streamed per microsecond.
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

from aotcombo.builder.kernels.linear import lowering as fused_linear_kernels  # noqa: E402
from aotcombo.builder.kernels import common as kernels_common
from aotcombo.builder.kernels.linear import recipe as kernels_linear_recipe

from aotcombo.builder import graph as g  # noqa: E402
from aotcombo.builder.trace.config import KERNEL_PRELUDE  # noqa: E402
from aotcombo.testing.compare import relative_error  # noqa: E402

# (M, K, N, dtype, pattern): transformer shapes from ViT-tiny/GPT-2 (the zoo) up to large GEMMs
SHAPES = [
    # the zoo's: ViT-tiny, GPT-2, Qwen2, the Llama block, BERT, GPT-2 block (fp32)
    (34, 192, 576, "bfloat16", "layer"), (34, 192, 768, "bfloat16", "layer+gelu"),
    (34, 768, 192, "bfloat16", "residual"),
    (128, 128, 384, "bfloat16", "layer"), (128, 512, 128, "bfloat16", "residual"), (90, 128, 384, "float16", "rms"),
    (128, 256, 384, "float32", "rms"), (128, 256, 1376, "float32", "rms"), (64, 128, 512, "float32", "layer+gelu"),
    (256, 256, 1024, "float32", "layer+gelu"), (256, 1024, 256, "float32", "residual"),
    # between them and cuBLAS's ground: BERT-base widths at small batch, an LLM's decode step
    (64, 768, 768, "bfloat16", "layer"), (128, 768, 2304, "bfloat16", "layer"),
    (128, 768, 3072, "bfloat16", "layer+gelu"),
    (128, 3072, 768, "bfloat16", "residual"), (256, 768, 2304, "bfloat16", "layer"),
    (1, 1024, 1536, "bfloat16", "rms"), (8, 1024, 1536, "bfloat16", "rms"), (8, 1024, 5632, "bfloat16", "rms"),
    (8, 2816, 1024, "bfloat16", "residual"), (1024, 768, 3072, "bfloat16", "layer+gelu"),
]
SETS, CALLS, REPLAYS = 4, 10, 50
# Other tile configs timed beside the rule's: what the rule is checked against.
CANDIDATES = [kernels_linear_recipe.Tiles(16, 32, 64, 4, 3), kernels_linear_recipe.Tiles(16, 64, 64, 4, 3),
              kernels_linear_recipe.Tiles(32, 32, 64, 4, 3),
              kernels_linear_recipe.Tiles(32, 64, 64, 4, 3), kernels_linear_recipe.Tiles(64, 64, 64, 4, 3),
              kernels_linear_recipe.Tiles(64, 128, 64, 4, 3),
              kernels_linear_recipe.Tiles(16, 32, 128, 4, 3), kernels_linear_recipe.Tiles(16, 32, 64, 2, 3)]

# The decode step's linears (K, N, pattern): sample_models/llm_decode.py's sizes, at --rows.
DECODE_LINEARS = ((1024, 1536, "rms"), (1024, 1024, "addmm"), (1024, 2816, "glu"), (2816, 1024, "addmm"),
                  (1024, 32000, "rms"))
# Llama-3-8B's (sample_models/full_size/llama_8b_decode.py; --shapes 8b): its lm head bare.
DECODE_LINEARS_8B = ((4096, 6144, "rms"), (4096, 4096, "addmm"), (4096, 14336, "glu"), (14336, 4096, "addmm"),
                     (4096, 128256, "plain"))
# A rank's of Llama-3-8B at --tensor-parallel 2 (--shapes llama8b_tp2): q/k/v, gate/up and the head column-wise,
# o and down row-wise (their partial sums all-reduced after, the residual added there).
DECODE_LINEARS_8B_TP2 = ((4096, 3072, "rms"), (2048, 4096, "plain"), (4096, 7168, "glu"), (7168, 4096, "plain"),
                         (4096, 64128, "rms"))
DECODE_LINEARS_1B = ((2048, 3072, "rms"), (2048, 2048, "addmm"), (2048, 8192, "glu"), (8192, 2048, "addmm"))  # 3.2-1B
# Tile configs (block_n, block_k, warps, stages) timed beside the rule's: GEMVs for one row
# (products summed on the CUDA cores), tensor-core tiles of 16 rows with long k steps for more.
GEMV_CANDIDATES = ((4, 1024, 4, 3), (8, 512, 4, 3), (8, 1024, 4, 1), (8, 1024, 8, 3), (16, 512, 4, 3),
                   (16, 256, 4, 3), (32, 256, 4, 3), (8, 256, 4, 3), (16, 1024, 8, 3), (32, 512, 8, 3),
                   (8, 128, 4, 3), (16, 128, 4, 3), (4, 256, 4, 3), (8, 2048, 8, 3),
                   (8, 128, 4, 3), (16, 128, 4, 3), (4, 256, 4, 3), (8, 2048, 8, 3))
# Llama-3-8B's and 3.2-1B's GEMVs: each tile with the products summed per step and once:
# (block_n, block_k, warps, stages, sum_once).
GEMV_CANDIDATES_LLAMA = tuple((bn, bk, warps, 1, once) for once in (False, True)
                              for bn, bk, warps in ((4, 1024, 4), (8, 512, 4), (16, 256, 4), (4, 512, 4), (2, 1024, 4),
                                                    (2, 2048, 4), (8, 1024, 8), (16, 512, 8), (2, 1024, 1),
                                                    (4, 1024, 1), (2, 2048, 2), (4, 1024, 2)))
DOT_CANDIDATES = ((16, 256, 4, 3), (16, 512, 4, 3), (16, 1024, 4, 2), (32, 256, 4, 3), (32, 512, 4, 3),
                  (64, 256, 4, 3), (32, 128, 4, 3), (16, 512, 8, 3))


def decode_recipe(m, k, n, pattern) -> kernels_linear_recipe.Recipe:
    """An llm_decode linear: no bias; "addmm": the residual as C; "glu": W of 2N rows."""
    glu = pattern == "glu"
    return kernels_linear_recipe.Recipe(m=m, n=n, k=k, weight_layout="nk", bias="full" if pattern == "addmm" else None,
                     glu=glu,
                     norm="rms" if pattern in ("rms", "glu") else None, eps=1e-5,
                     norm_weight=pattern in ("rms", "glu"),
                     norm_bias=False, norm_cast="bfloat16" if pattern in ("rms", "glu") else None, extras=(),
                     epilogue=(("t0", "silu", ("acc",)), ("t1", "mul", ("t0", "acc_up"))) if glu else (),
                     result="t1" if glu else "acc", dtype="bfloat16", out_dtype="bfloat16")


def recipe(m, k, n, dtype, pattern) -> kernels_linear_recipe.Recipe:
    norm = "rms" if "rms" in pattern else "layer" if "layer" in pattern else None
    epilogue, extras = (), ()
    if "gelu" in pattern:
        epilogue = (("t0", "gelu", ("acc",)),)
    if "residual" in pattern:
        epilogue, extras = (("t0", "add", ("acc", "e0")),), ("full",)
    return kernels_linear_recipe.Recipe(m=m, n=n, k=k, weight_layout="nk", bias="row", glu=False, norm=norm, eps=1e-5,
                     norm_weight=norm is not None, norm_bias=norm == "layer", norm_cast=None, extras=extras,
                     epilogue=epilogue, result="t0" if epilogue else "acc", dtype=dtype, out_dtype=dtype)


def operands(r: kernels_linear_recipe.Recipe, device, seed: int) -> dict:
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, r.dtype)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

    t = {"x": rand(r.m, r.k), "w": rand(r.n * (2 if r.glu else 1), r.k, scale=r.k ** -0.5)}
    if r.bias:
        t["bias"] = rand(r.n, scale=0.1) if r.bias == "row" else rand(r.m, r.n)
    if r.norm_weight:
        t["norm_weight"] = 1 + rand(r.k, scale=0.1)
    if r.norm_bias:
        t["norm_bias"] = rand(r.k, scale=0.1)
    if r.extras:
        t["e0"] = rand(r.m, r.n)
    t["out"] = torch.empty(r.m, r.n, dtype=dtype, device=device)
    return t


def reference(r: kernels_linear_recipe.Recipe, t: dict, dtype=None) -> torch.Tensor:
    """The unfused ops: torch's kernels (in ``dtype``: float64 for the check)."""
    cast = (lambda v: v.to(dtype)) if dtype else (lambda v: v)
    x = cast(t["x"])
    if r.norm == "layer":
        x = F.layer_norm(x, (r.k,), cast(t["norm_weight"]), cast(t["norm_bias"]), r.eps)
    elif r.norm == "rms":
        x = F.rms_norm(x, (r.k,), cast(t["norm_weight"]), r.eps)
    if r.bias == "full":
        return torch.addmm(cast(t["bias"]), x, cast(t["w"]).t())
    y = F.linear(x, cast(t["w"]), cast(t["bias"]) if r.bias else None)
    if r.glu:
        return F.silu(y[:, :r.n]) * y[:, r.n:]
    if "t0" in r.result:
        y = F.gelu(y) if r.epilogue[0][1] == "gelu" else y + cast(t["e0"])
    return y


def fused_kernel(r: kernels_linear_recipe.Recipe, t: dict, directory: Path,
                 config: kernels_linear_recipe.Tiles | None = None):
    """The launch of ``r``'s kernel (by the rule, or ``config``) on tensor sets like ``t``, and the kernel.
    Operands in the recipe's order: a quantized weight's scale first (``quant_gemv_bench.py``)."""
    names = ["x", "w"] + [n for n in ("scale", "bias", "norm_weight", "norm_bias", "e0") if n in t]
    specs = {n: g.TensorSpec(tuple(t[n].shape), tuple(t[n].stride()), str(t[n].dtype).removeprefix("torch."))
             for n in names + ["out"]}
    op = g.Extern(op=f"{kernels_linear_recipe.OP}.default",
                  args=(g.Ref("x"), g.Ref("w"), [g.Ref(n) for n in names[2:]], r.to_json()),
                  kwargs=(), out="out", writes=())
    kernel, args = fused_linear_kernels.kernel_for(op, specs, config)
    path = directory / f"{kernel.name}.py"
    path.write_text("import triton\nimport triton.language as tl\n" + "\n".join(KERNEL_PRELUDE) + "\n\n"
                    + kernel.source)
    spec = importlib.util.spec_from_file_location(kernel.name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, kernel.name)

    def launch(tensors):
        fn[kernel.grid](*(tensors[a.name] for a in args), **dict(kernel.tiles), num_warps=kernel.num_warps,
                        num_stages=kernel.num_stages)

    return launch, kernel


def checked(r: kernels_linear_recipe.Recipe, device, directory: Path):
    """The rule's kernel for ``r`` on timing sets and on a fresh check set (its output
    poisoned first): (sets, launch, kernel, check set, float64 reference, relative L2 error)."""
    sets = [operands(r, device, seed) for seed in range(SETS)]
    launch, kernel = fused_kernel(r, sets[0], directory)
    check = operands(r, device, 100)
    check["out"].fill_(float("nan"))
    launch(check)
    ref = reference(r, check, torch.float64)
    return sets, launch, kernel, check, ref, relative_error(check["out"], ref)


def time_graph(step, sets, calls: int = CALLS, replays: int = REPLAYS) -> float:
    """Median microseconds per call of ``step(tensors)``, from CUDA-graph replays of ``calls`` calls."""
    for tensors in sets:
        step(tensors)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            step(sets[i % len(sets)])
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def best(others: dict) -> str:
    timed = {k: v for k, v in others.items() if isinstance(v, float)}
    return min(timed.items(), key=lambda kv: kv[1]) if timed else "-"


def decode(out: Path | None, row_counts: list[int], linears=DECODE_LINEARS) -> None:
    """The decode step's linears: the rule's kernel and other tiles against cuBLAS."""
    device, rows = torch.device("cuda"), []
    with tempfile.TemporaryDirectory() as tmp:
        for m, (k, n, pattern) in ((m, shape) for m in row_counts for shape in linears):
            r = decode_recipe(m, k, n, pattern)
            sets, launch, kernel, check, ref, error = checked(r, device, Path(tmp))
            unfused = time_graph(lambda t: t["out"].copy_(reference(r, t)), sets)
            if r.bias == "full":
                cublas = time_graph(lambda t: torch.addmm(t["bias"], t["x"], t["w"].t(), out=t["out"]), sets)
            else:
                cublas = time_graph(lambda t: F.linear(t["x"], t["w"]), sets)
            fused = time_graph(launch, sets)
            others = {}
            rule = kernels_linear_recipe.tiles(m, n, k, r.dtype, glu=r.glu)
            gemv = m <= kernels_linear_recipe.GEMV_MAX_ROWS
            candidates = (GEMV_CANDIDATES_LLAMA if linears is not DECODE_LINEARS else GEMV_CANDIDATES) if gemv \
                else DOT_CANDIDATES
            for bn, bk, warps, stages, *flags in candidates:
                config = kernels_linear_recipe.Tiles(kernels_common.next_power_of_2(m) if gemv else 16, bn,
                                  min(bk, kernels_common.next_power_of_2(k)), warps,
                                  stages, gemv=gemv, sum_once=bool(flags and flags[0]))
                name = f"{bn}x{config.block_k}/{warps}w{stages}s" + ("/once" if config.sum_once else "")
                if config == rule or gemv and config.block_m * bn * config.block_k > 32768:
                    continue
                other, _ = fused_kernel(r, sets[0], Path(tmp), config)
                try:
                    check["out"].fill_(float("nan"))
                    other(check)
                    if not relative_error(check["out"], ref) <= 1e-2:
                        others[name] = f"WRONG {relative_error(check['out'], ref):.1e}"
                        continue
                    others[name] = round(time_graph(other, sets), 2)
                except Exception as exc:  # noqa: BLE001 - a config that does not fit
                    others[name] = type(exc).__name__
            weight_bytes = sets[0]["w"].numel() * 2
            row = {"m": m, "k": k, "n": n, "pattern": pattern, "weight_mb": round(weight_bytes / 1e6, 2),
                   "cublas_us": round(cublas, 2), "unfused_us": round(unfused, 2), "fused_us": round(fused, 2),
                   "vs_cublas": round(cublas / fused, 2), "gb_per_s": round(weight_bytes / fused / 1e3),
                   "rel_error": error, "ok": error <= 1e-2, "tiles": kernel.source.splitlines()[2].split("tiles ")[-1],
                   "programs": kernel.grid[0], "other_tiles_us": others, "device": torch.cuda.get_device_name()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\n{'M':>3} {'K':>5} {'N':>6} {'pattern':>7} {'MB':>6} {'cuBLAS':>7} {'unfused':>8} {'fused':>7} "
          f"{'vs cuBLAS':>9} {'GB/s':>6} {'err':>8}")
    for r in rows:
        print(f"{r['m']:>3} {r['k']:>5} {r['n']:>6} {r['pattern']:>7} {r['weight_mb']:>6.2f} {r['cublas_us']:>7.2f} "
              f"{r['unfused_us']:>8.2f} {r['fused_us']:>7.2f} {r['vs_cublas']:>8.2f}x {r['gb_per_s']:>6} "
              f"{r['rel_error']:>8.1e}" + ("" if r["ok"] else "  WRONG") + f"  best other: {best(r['other_tiles_us'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--decode", action="store_true", help="the LLM decode step's linears")
    parser.add_argument("--rows", default="1,8", help="with --decode: the row counts (batch sizes), e.g. 1,2,4,8")
    parser.add_argument("--shapes", choices=("llm_decode", "llama8b", "llama8b_tp2", "llama1b"), default="llm_decode",
                        help="with --decode: sample_models/llm_decode.py's linears, Llama-3-8B's (a rank's at TP 2) "
                        "or Llama-3.2-1B's")
    args = parser.parse_args()
    if args.decode:
        return decode(args.out, [int(m) for m in args.rows.split(",")],
                      {"llama8b": DECODE_LINEARS_8B, "llama8b_tp2": DECODE_LINEARS_8B_TP2,
                       "llama1b": DECODE_LINEARS_1B}.get(args.shapes, DECODE_LINEARS))
    device = torch.device("cuda")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n, dtype, pattern in SHAPES:
            r = recipe(m, k, n, dtype, pattern)
            sets, launch, kernel, check, ref, error = checked(r, device, Path(tmp))
            unfused = time_graph(lambda t: t["out"].copy_(reference(r, t)), sets)
            fused = time_graph(launch, sets)
            others, errors = {}, {}
            if dtype == "float32":  # the rule's tiles with exact fp32 products instead of tf32x3
                chosen, kernels_linear_recipe.FP32_DOT_PRECISION = kernels_linear_recipe.FP32_DOT_PRECISION, "ieee"
                try:
                    ieee, _ = fused_kernel(r, sets[0], Path(tmp))
                finally:
                    kernels_linear_recipe.FP32_DOT_PRECISION = chosen
                check["out"].fill_(float("nan"))
                ieee(check)
                others["rule/ieee"] = round(time_graph(ieee, sets), 2)
                errors["rule/ieee"] = relative_error(check["out"], ref)
            for config in CANDIDATES:
                if dtype == "float32":
                    config = kernels_linear_recipe.Tiles(config.block_m, config.block_n, 32, config.num_warps, 2)
                if config == kernels_linear_recipe.tiles(m, n, k, dtype) or config.block_m > 2 * max(16, m):
                    continue
                other, _ = fused_kernel(r, sets[0], Path(tmp), config)
                try:
                    others[f"{config.block_m}x{config.block_n}x{config.block_k}/{config.num_warps}w"] = round(
                        time_graph(other, sets), 2)
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
