#!/usr/bin/env python3
"""A model with torchao's float8 dynamic activations against our bf16 package, on one GPU of sm_89 or later
(issue 27: the fp8 package >= 1.3x faster than the bf16 one). ``--model vit_base`` (default): ViT-B/16
(sample_models/full_size/vit_base.py, bf16, 8 images at 224); ``--model llama_1b``: Llama 3.2 1B's prefill of
a 512-token prompt (sample_models/full_size/llama_1b.py, bf16, ``get_prompt_inputs``).

    PYTHONPATH=<site with the wheels and torchao>:. PYTHONUNBUFFERED=1 \\
        python3 benchmarks/float8_bench.py --out $OUT [--model llama_1b] [--calls 200] [--no-compile]

Packages ``full_<model>_bf16`` and ``full_<model>_fp8`` (``Float8DynamicActivationFloat8WeightConfig(
granularity=PerRow())`` on ViT's blocks' linears; on every Llama linear, the LM head included), built on a
machine with torchao:

    aotcombo build sample_models/full_size/vit_base.py --name full_vit_base_bf16 --model-fn get_bf16_model \
        --inputs-fn get_bf16_example_inputs --weights external --arch sm_90 --out .carry/fp8vit
    aotcombo build sample_models/full_size/vit_base.py --name full_vit_base_fp8 --model-fn get_float8_model \
        --inputs-fn get_bf16_example_inputs --weights external --arch sm_90 --out .carry/fp8vit
    aotcombo build sample_models/full_size/llama_1b.py --name full_llama_1b_bf16 --model-fn get_model \
        --inputs-fn get_prompt_inputs --weights external --arch sm_90 --out .carry/fp8llama
    aotcombo build sample_models/full_size/llama_1b.py --name full_llama_1b_fp8 --model-fn get_float8_model \
        --inputs-fn get_prompt_inputs --weights external --arch sm_90 --out .carry/fp8llama

Here both eager models are made from the file
(same seed); the bf16 package is given the bf16 model's ``state_dict()``, the fp8 package the
flattened torchao model's (``subclasses.flatten``: ``<layer>.weight.qdata`` float8, ``.scale`` float32,
the names the package was built with).

Checks first (graph mode, the capturing call and a replay, on inputs of fresh seeds): the fp8 package
against torchao's eager float8 output, relative L2 <= max(5e-2, 2 x torchao eager's own error against
the bf16 model in float32); the bf16 package against eager bf16 (aotcombo.testing.zoo.check). Then,
timed as synchronized wall clock per call (median of ``--calls``), call by call in turn (A B A B ...):
- ``bf16_default`` / ``fp8_default``: ``pkg.load("cuda")`` called with the caller's tensors;
- ``bf16_static`` / ``fp8_static``: ``m(*m.static_inputs())`` with ``copy_outputs=False``;
- ``bf16_eager`` / ``torchao_eager``: the eager models under ``torch.no_grad()``;
then, last and alone (its CUDA graph trees must not record while ours are live), each
``torch.compile(mode="reduce-overhead")``: ``torchao_compile_ro`` under the Inductor settings torchao's
``quantize_`` sets (coordinate descent tuning, as its users get), ``bf16_compile_ro`` under Inductor's
defaults. A variant that fails is printed and the others go on. One JSON line per variant and a summary
line (ratios, device) go to ``$OUT/float8_bench.jsonl``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.compare import relative_error  # noqa: E402
from aotcombo.testing.timing import sync, time_synced, time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, as_float32, check, model_file  # noqa: E402

SEEDS = (301, 302, 303, 304)
# --model -> the model file's functions: (bf16 model, float8 model, inputs).
MODELS = {"vit_base": ("get_bf16_model", "get_float8_model", "get_bf16_example_inputs"),
          "llama_1b": ("get_model", "get_float8_model", "get_prompt_inputs")}
PACKAGES = {"bf16": "full_vit_base_bf16", "fp8": "full_vit_base_fp8"}  # set by --model
# What torchao's quantize_ sets process-wide (torchao.quantization.utils.recommended_inductor_config_setter).
TORCHAO_INDUCTOR = ("coordinate_descent_tuning", "coordinate_descent_check_all_directions",
                    "force_fuse_int_mm_with_mul", "fx_graph_cache", "triton.unique_kernel_names")
DEVICE = torch.device("cuda")  # --device cpu: a smoke test of this script, with stand-in packages
OUT = Path("float8_bench.jsonl")


def emit(rows: list, row: dict) -> None:
    """``row`` kept, printed and appended to ``OUT`` at once (a crash later loses none)."""
    rows.append(row)
    print(json.dumps(row), flush=True)
    with open(OUT, "a") as f:
        f.write(json.dumps(row) + "\n")


def failed(rows: list, variant: str, exc: BaseException) -> None:
    traceback.print_exc()
    emit(rows, {"variant": variant, "error": f"{type(exc).__name__}: {str(exc)[-600:]}"})


def check_fp8(got, want, reference) -> dict:
    """The fp8 package against torchao's eager output; torchao's own error against fp32 sets the bar."""
    own = relative_error(want, reference)
    error, tolerance = relative_error(got, want), max(5e-2, 2 * own)
    return {"error_vs_torchao": error, "torchao_error_vs_fp32": own, "error_vs_fp32": relative_error(got, reference),
            "tolerance": tolerance, "argmax_agree": float((got.argmax(-1) == want.argmax(-1)).float().mean()),
            "ok": error <= tolerance}


def load_packages(eager: dict, rows: list) -> dict:
    """Each package loaded twice (default; static serving path), its weights from the eager models."""
    from aotcombo.builder.kernels.linear import subclasses

    weights = {"bf16": lambda: eager["bf16"].state_dict(),
               "fp8": lambda: subclasses.flatten(eager["fp8"], (90,)).state_dict()}
    loaded = {}
    for kind, name in PACKAGES.items():
        try:
            package, w = importlib.import_module(name), weights[kind]()
            loaded[kind] = (package.load(str(DEVICE), weights=w),
                            package.load(str(DEVICE), copy_outputs=False, weights=w))
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            failed(rows, f"{kind}_package", exc)
    return loaded


def run_checks(loaded: dict, eager: dict, sets: list, reference: list, rows: list) -> None:
    for kind, (m, _) in loaded.items():
        try:
            report = []
            for x, ref32 in zip(sets[:2], reference[:2]):
                with torch.no_grad():
                    want = eager[kind](*x)
                for call in range(2):  # graph mode: the call that captures, then a replay
                    got = m(*x)
                    report.append(check_fp8(got, want, ref32) if kind == "fp8" else
                                  {**check(got, want, ref32)[0], "call": call})
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            failed(rows, f"{kind}_check", exc)
            continue
        emit(rows, {"variant": f"{kind}_check", "ok": all(r["ok"] for r in report), "checks": report})


def time_together(variants: dict, calls: int, rows: list) -> None:
    """``variants``: name -> (fn, sets), timed call by call in turn; if that fails, each alone."""
    device = DEVICE
    ready = {}
    for name, (fn, sets) in variants.items():
        try:
            with torch.no_grad():
                warm_up(fn, sets, device, calls=5, seconds=0.3)
            ready[name] = (fn, sets)
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            failed(rows, name, exc)
    try:
        with torch.no_grad():
            stats = time_synced_interleaved([f for f, _ in ready.values()], [s for _, s in ready.values()], device,
                                            calls)
        timed = dict(zip(ready, stats))
    except Exception:  # noqa: BLE001 - one of them failed midway: each alone
        traceback.print_exc()
        timed = {}
        for name, (fn, sets) in ready.items():
            try:
                with torch.no_grad():
                    timed[name] = time_synced(fn, sets, device, calls)
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                failed(rows, name, exc)
    for name, s in timed.items():
        emit(rows, {"variant": name, "ms": s["median"], "p10": s["p10"], "p90": s["p90"], "calls": s["n"],
                    "interleaved": len(timed) > 1})


def time_ours_and_eager(eager: dict, sets: list, reference: list, calls: int, rows: list) -> None:
    """Both packages loaded, checked and timed with the eager models; all of them released on return."""
    loaded = load_packages(eager, rows)
    run_checks(loaded, eager, sets, reference, rows)
    variants = {}
    for kind, (m, static) in loaded.items():
        inputs = static.static_inputs()
        for dst, src in zip(inputs, sets[0]):
            dst.copy_(src)
        variants[f"{kind}_default"], variants[f"{kind}_static"] = (m, sets), (static, [inputs])
    variants["bf16_eager"] = (eager["bf16"], sets)
    if "fp8" in eager:
        variants["torchao_eager"] = (eager["fp8"], sets)
    time_together(variants, calls, rows)


def time_compiled(name: str, model, sets: list, calls: int, settings: dict, rows: list) -> None:
    """``torch.compile(mode="reduce-overhead")`` of ``model`` under Inductor ``settings``, compile kept out."""
    from torch._inductor import config

    device = DEVICE
    start = time.perf_counter()
    try:
        with config.patch(settings), torch.no_grad():
            compiled = torch.compile(model, mode="reduce-overhead")

            def ro(*x):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(*x)

            for _ in range(3):
                ro(*sets[0])
            sync(device)
            compile_s = time.perf_counter() - start
            warm_up(ro, sets, device, calls=5, seconds=0.3)
            s = time_synced(ro, sets, device, calls)
        emit(rows, {"variant": name, "ms": s["median"], "p10": s["p10"], "p90": s["p90"], "calls": s["n"],
                    "compile_s": round(compile_s, 1), "interleaved": False})
    except Exception as exc:  # noqa: BLE001 - reported, the run goes on
        failed(rows, name, exc)
    torch._dynamo.reset()


def device_name() -> str:
    return torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else str(DEVICE)


def summary(rows: list) -> dict:
    ms = {r["variant"]: r["ms"] for r in rows if "ms" in r}
    out = {"variant": "summary", "device": device_name(), "torch": torch.__version__, "packages": PACKAGES}
    for a, b in (("bf16_default", "fp8_default"), ("bf16_static", "fp8_static"), ("torchao_eager", "fp8_static"),
                 ("torchao_compile_ro", "fp8_default"), ("torchao_compile_ro", "fp8_static"),
                 ("bf16_compile_ro", "bf16_static"), ("bf16_compile_ro", "fp8_static")):
        if a in ms and b in ms:
            out[f"{a}/{b}"] = round(ms[a] / ms[b], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE.parent / "out"), help="for float8_bench.jsonl (default %(default)s)")
    parser.add_argument("--model", choices=sorted(MODELS), default="vit_base")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global DEVICE, OUT, PACKAGES
    DEVICE, OUT = torch.device(args.device), Path(args.out) / "float8_bench.jsonl"
    PACKAGES = {kind: f"full_{args.model}_{kind}" for kind in ("bf16", "fp8")}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    print(f"{args.model} on {device_name()}, torch {torch.__version__}", flush=True)
    from torch._inductor import config

    defaults = {key: config.get_config_copy()[key] for key in TORCHAO_INDUCTOR}  # before quantize_ changes them
    source, rows = model_file(args.model, FULL_SIZE_DIR), []
    bf16_fn, fp8_fn, inputs_fn = (getattr(source, name) for name in MODELS[args.model])
    sets = [tuple(t.to(DEVICE) for t in inputs_fn(seed=seed)) for seed in SEEDS]
    eager = {"bf16": bf16_fn(device=DEVICE)}
    with torch.no_grad():
        model32 = as_float32(eager["bf16"], sets[0])[0]
        reference = [model32(*(t.float() if t.is_floating_point() else t for t in x)) for x in sets[:2]]
        del model32
    try:
        eager["fp8"] = fp8_fn(device=DEVICE)
    except Exception as exc:  # noqa: BLE001 - reported, the run goes on
        failed(rows, "torchao_model", exc)
    torchao_settings = {key: config.get_config_copy()[key] for key in TORCHAO_INDUCTOR}
    emit(rows, {"variant": "inductor", "defaults": defaults, "after_torchao": torchao_settings})
    time_ours_and_eager(eager, sets, reference, args.calls, rows)
    gc.collect()  # our CUDA graphs freed before torch.compile's graph trees record
    torch.cuda.empty_cache()
    if not args.no_compile and DEVICE.type == "cuda":
        if "fp8" in eager:
            time_compiled("torchao_compile_ro", eager["fp8"], sets, args.calls, torchao_settings, rows)
        time_compiled("bf16_compile_ro", eager["bf16"], sets, args.calls, defaults, rows)
    emit(rows, summary(rows))
    print(f"\n{'variant':20} {'ms':>8} {'p10':>8} {'p90':>8}  (median per call, {args.calls} calls)")
    for r in rows:
        if "ms" in r:
            print(f"{r['variant']:20} {r['ms']:8.3f} {r['p10']:8.3f} {r['p90']:8.3f}"
                  + (f"  compile {r['compile_s']} s" if "compile_s" in r else ""))
        elif "error" in r:
            print(f"{r['variant']:20} failed: {r['error'][:100]}")
    print("ratios (>1: the second is faster): "
          + ", ".join(f"{k} {v}" for k, v in rows[-1].items() if "/" in k))


if __name__ == "__main__":
    main()
