#!/usr/bin/env python3
"""The full-size Llama 3.2 1B decode step (sample_models/full_size/llama_1b_decode.py) bf16, int8 and
int4 weight-only, on one GPU: our packages against each other and against torch.compile of torchao's
models (issue 27).

    PYTHONPATH=<site with the wheels and torchao>:. PYTHONUNBUFFERED=1 \\
        python3 benchmarks/quantized_llm_bench.py --out $OUT [--positions 5,1000] [--calls 300] [--no-compile]

Packages (``--weights external --arch sm_90``): ``full_llama_1b_decode`` (``get_model``),
``full_llama_1b_decode_int8`` (``--model-fn get_int8_model``: torchao ``Int8WeightOnlyConfig``) and
``full_llama_1b_decode_int4`` (``--model-fn get_int4_model``: ``IntxWeightOnlyConfig(int4, PerGroup(128))``).
Each eager model is made on the GPU from the file (random weights, one seed); its package is given the
model's ``state_dict()``, for torchao's the flattened model's (``subclasses.flatten``: ``<layer>.weight.qdata``
int8, ``.scale``: the names the package was built with).

Checks first, from an empty cache, ``--steps`` steps (graph mode: op by op, the capture, replays): the
logits of each package against a float32 model of the same weights (torchao's dequantized exactly),
relative L2 <= max(1e-2, 2 x its eager model's own error against it) (tests/gpu/test_gpu_quantized.py's
rule); the error against the eager model itself (torchao's for int8/int4) is printed too; then the cache.
Then, per cache position, the serving path (static inputs, ``copy_outputs=False``, graph mode) of the
three packages call by call in turn (A B C A B C ...), median ms per step over ``--calls``. Last, our
packages freed (its CUDA graph trees must not record while ours are live), ``torch.compile(mode=
"reduce-overhead")`` of each torchao model, compiled and warmed up outside the timing under the Inductor
settings torchao's ``quantize_`` set (as its users get; ``--inductor-defaults``: Inductor's), the two
timed call by call in turn. A step's bytes are what it must read: the package's weights but the embedding
table (a row gathered; the bf16 LM head, tied to it, reads it whole) and the cache positions up to its
own (int4: two a byte, plus group scales). ``--also LABEL=PACKAGE:MODEL_FN`` adds a package built another
way from the same model function (an A/B of a kernel rule), timed with ours, not compiled. Over the
step's time, set against a device-to-device copy's bandwidth (read + write) measured in this run. A variant
that fails is printed and the others go on. JSON lines to
``$OUT/quantized_llm_bench.jsonl``; ``--compile-deadline`` keeps the run within one GPU call.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.builder.kernels.linear.quant import Quant, dequantize_eager  # noqa: E402
from aotcombo.testing.compare import relative_error  # noqa: E402
from aotcombo.testing.timing import copy_bandwidth, time_synced, time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, check, model_file  # noqa: E402

VARIANTS = {"bf16": ("full_llama_1b_decode", "get_model"), "int8": ("full_llama_1b_decode_int8", "get_int8_model"),
            "int4": ("full_llama_1b_decode_int4", "get_int4_model")}
QUANTIZED = (".weight.qdata", ".weight.scale", ".weight.zero_point")
INDUCTOR = ("coordinate_descent_tuning", "coordinate_descent_check_all_directions", "force_fuse_int_mm_with_mul",
            "fx_graph_cache", "triton.unique_kernel_names")


def inductor_settings() -> dict:
    from torch._inductor import config

    now = config.get_config_copy()
    return {key: now[key] for key in INDUCTOR if key in now}


def add_variants(specs: list[str]) -> list[str]:
    """``LABEL=PACKAGE:MODEL_FN`` each (``--also``) into ``VARIANTS``; their labels."""
    for spec in specs:
        label, _, target = spec.partition("=")
        VARIANTS[label] = tuple(target.split(":"))
    return [spec.partition("=")[0] for spec in specs]


def failed(rows: list, variant: str, exc: BaseException) -> None:
    traceback.print_exc()
    rows.append({"variant": variant, "error": f"{type(exc).__name__}: {str(exc)[-600:]}"})
    print(json.dumps(rows[-1]), flush=True)


def float_reference(source, device):
    """One float32 model for every variant's check, its LM head untied (the quantized head is not the
    embedding); ``load_reference`` gives it a variant's weights."""
    model32 = source.get_model(dtype=torch.float32, device=device)
    inner = model32.exportable.model
    inner.lm_head.weight = torch.nn.Parameter(torch.empty_like(inner.lm_head.weight), requires_grad=False)
    inner.config.tie_word_embeddings = False
    return model32


def load_reference(model32, weights: dict) -> None:
    """``weights`` (a state_dict, flattened for torchao's) into ``model32``: each quantized linear's weight
    dequantized in float32 (exact: int8 or int4 times a bf16 or float32 scale), the rest cast to float32."""
    state = {}
    for key, value in weights.items():
        if key.endswith(".weight.qdata"):
            layer = key.removesuffix(".qdata")
            scale, zero = weights[f"{layer}.scale"], weights.get(f"{layer}.zero_point")
            int4 = value.dtype == torch.uint8  # two a byte as q + 8 (subclasses.PackedInt4Linear)
            k = value.shape[1] * (2 if int4 else 1)
            spec = Quant(bits=4 if int4 else 8, group=k // scale.reshape(value.shape[0], -1).shape[1],
                         high_first=False, zero="none" if zero is None else "point", zero_value=8.0 if int4 else 0.0,
                         dtype="float32")
            state[layer] = dequantize_eager(value, scale, zero, spec)
        elif not key.endswith(QUANTIZED):
            state[key] = value.float() if value.is_floating_point() else value
    model32.load_state_dict(state)


def check_steps(source, loaded, eager, model32, steps: int) -> dict:
    """``steps`` decode steps from an empty cache: the package's logits against the float32 model (the
    verdict) and against eager; then its cache against eager's and the float32 model's (``check``)."""
    logits = []
    with torch.no_grad():
        for pos in range(steps):
            x = tuple(t.cuda() for t in source.get_example_inputs(pos=pos, seed=100 + pos))
            got, want, ref = loaded(*x), eager(*x), model32(*x)
            own = relative_error(want, ref)
            error, tolerance = relative_error(got, ref), max(1e-2, 2 * own)
            logits.append({"step": pos, "error": error, "eager_error": own, "tolerance": tolerance,
                           "error_vs_eager": relative_error(got, want), "ok": error <= tolerance,
                           "argmax_agrees": bool(got.argmax() == want.argmax())})
        caches, caches32 = dict(eager.named_buffers()), dict(model32.named_buffers())
        state = [row for key, t in loaded.state().items() for row in check(t, caches[key], caches32[key])]
    return {"ok": all(r["ok"] for r in logits + state), "logits": logits,
            "state_max_error": max((r.get("error", 0.0) for r in state), default=0.0),
            "state_ok": all(r["ok"] for r in state)}


def load_and_check(source, package_name: str, model_fn: str, model32, steps: int, rows: list, label: str):
    """The eager model made on the GPU, its package loaded with its weights (serving path) and checked."""
    import aotcombo

    package = importlib.import_module(package_name)
    model = getattr(source, model_fn)(device="cuda")
    weights = aotcombo.quantized_state_dict(model)  # the model's own for bf16
    load_reference(model32, weights)
    m = package.load("cuda", weights=weights, copy_outputs=False)
    rows.append({"variant": f"{label}_check", **check_steps(source, m, model, model32, steps)})
    print(json.dumps(rows[-1]), flush=True)
    m.reset_state()
    return m, package.manifest, model


def step_bytes(manifest, position: int, max_cache: int) -> int:
    """What a step must read: the weights but the embedding table (the bf16 LM head tied to it reads it
    whole, as ``same_as``), and the cache positions up to ``position``."""
    total, state = 0, set(manifest.weights.state)
    for t in manifest.weights.tensors:
        size = math.prod(t.shape) * getattr(torch, t.dtype).itemsize
        if t.name in state:
            if "key_cache" in t.name or "value_cache" in t.name:
                total += size // max_cache * (position + 1)
        elif "embed_tokens" not in t.name:
            total += size
    return total


def filled(model, source, position: int) -> list:
    """``model``'s static inputs holding a step at ``position``: the serving path's one input set."""
    static = model.static_inputs()
    for dst, src in zip(static, source.get_example_inputs(pos=position, seed=position)):
        dst.copy_(src)
    return [static]


def time_together(fns: dict, sets: dict, calls: int, rows: list) -> dict:
    """``fns`` warmed up, then timed call by call in turn (each alone if that fails): name -> ms."""
    device, ready, timed = torch.device("cuda"), {}, {}
    with torch.no_grad():
        for name, fn in fns.items():
            try:
                warm_up(fn, sets[name], device, calls=10, seconds=0.3)
                ready[name] = fn
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                failed(rows, name, exc)
        try:
            stats = time_synced_interleaved(list(ready.values()), [sets[n] for n in ready], device, calls)
            timed = {name: s["median"] for name, s in zip(ready, stats)}
        except Exception:  # noqa: BLE001 - one of them failed midway: each alone
            traceback.print_exc()
            for name, fn in ready.items():
                try:
                    timed[name] = time_synced(fn, sets[name], device, calls)["median"]
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    failed(rows, name, exc)
    return timed


def compiled_step(model, source, rows: list, label: str, settings: dict):
    """``torch.compile(mode="reduce-overhead")`` of ``model`` under Inductor ``settings``, compiled and its
    graphs recorded here."""
    from torch._inductor import config

    start = time.perf_counter()
    try:
        compiled = torch.compile(model, mode="reduce-overhead")

        def ro(*x):
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*x)

        x = tuple(t.cuda() for t in source.get_example_inputs(pos=5, seed=5))
        with torch.no_grad(), config.patch(settings):
            for _ in range(3):
                ro(*x)
        torch.cuda.synchronize()
        rows.append({"variant": label, "compile_s": round(time.perf_counter() - start, 1)})
        print(json.dumps(rows[-1]), flush=True)
        return ro
    except Exception as exc:  # noqa: BLE001 - reported, the run goes on
        failed(rows, label, exc)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE.parent / "out"), help="for quantized_llm_bench.jsonl")
    parser.add_argument("--positions", default="5,1000")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--steps", type=int, default=4, help="decode steps checked from an empty cache")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--inductor-defaults", action="store_true",
                        help="compile under Inductor's defaults, not the settings torchao's quantize_ made")
    parser.add_argument("--compile-deadline", type=float, default=330,
                        help="seconds into the run after which no torch.compile starts (default %(default)s)")
    parser.add_argument("--also", action="append", default=[], metavar="LABEL=PACKAGE:MODEL_FN",
                        help="another package of a model function, timed beside ours (repeatable)")
    args = parser.parse_args()
    add_variants(args.also)
    begin, device, rows = time.perf_counter(), torch.device("cuda"), []
    Path(args.out).mkdir(parents=True, exist_ok=True)
    positions = [int(p) for p in args.positions.split(",")]
    source = model_file("llama_1b_decode", FULL_SIZE_DIR)
    defaults = inductor_settings()  # before quantize_ changes them
    copy = copy_bandwidth(device, 1 << 30, 25, 200)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device copy {copy['GBps']:.0f} GB/s", flush=True)
    model32 = float_reference(source, "cuda")
    loaded, manifests, eager = {}, {}, {}
    for label, (package_name, model_fn) in VARIANTS.items():
        try:
            m, manifests[label], model = load_and_check(source, package_name, model_fn, model32, args.steps, rows,
                                                         label)
            loaded[label] = m
            if label in ("int8", "int4"):
                eager[label] = model  # for torch.compile, last
            del m, model
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            failed(rows, f"{label}_check", exc)
        gc.collect()
        torch.cuda.empty_cache()
    del model32
    settings = defaults if args.inductor_defaults else inductor_settings()
    rows.append({"variant": "inductor_settings", "defaults": defaults, "compile_ro": settings})
    gc.collect()
    torch.cuda.empty_cache()

    def timing_row(position: int, label: str, path: str, ms: float) -> dict:
        nbytes = step_bytes(manifests[label], position, source.MAX_CACHE)
        row = {"variant": f"{label}_{path}", "position": position, "ms": ms, "bytes": nbytes,
               "copy_fraction": nbytes / (ms * 1e-3) / copy["GBps"] / 1e9}
        rows.append(row)
        print(json.dumps(row), flush=True)
        return row

    timings: dict = {}
    sets: dict = {}
    for position in positions:
        sets = {label: filled(m, source, position) for label, m in loaded.items()}
        for label, ms in time_together(loaded, sets, args.calls, rows).items():
            timings[position, label, "ours"] = timing_row(position, label, "ours", ms)
    del loaded, sets
    gc.collect()
    torch.cuda.empty_cache()
    compiled = {}
    for label, model in ({} if args.no_compile else eager).items():
        if time.perf_counter() - begin > args.compile_deadline:
            rows.append({"variant": f"{label}_compile_ro", "error": f"skipped: past --compile-deadline "
                                                                    f"{args.compile_deadline} s"})
            print(json.dumps(rows[-1]), flush=True)
            continue
        ro = compiled_step(model, source, rows, f"{label}_compile_ro", settings)
        if ro is not None:
            compiled[label] = ro
    for position in positions if compiled else ():
        sets = {label: [tuple(t.cuda() for t in source.get_example_inputs(pos=position, seed=position))]
                for label in compiled}
        for label, ms in time_together(compiled, sets, args.calls, rows).items():
            timings[position, label, "compile_ro"] = timing_row(position, label, "compile_ro", ms)
    summary = {"variant": "summary", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "copy": copy, "calls": args.calls, "seconds": round(time.perf_counter() - begin, 1)}
    for (position, label, path), row in timings.items():
        bf16 = timings.get((position, "bf16", "ours"))
        if path == "ours" and bf16 and label != "bf16":
            summary[f"{label}/bf16@{position}"] = round(row["ms"] / bf16["ms"], 3)
        ours = timings.get((position, label, "ours"))
        if path == "compile_ro" and ours:
            summary[f"{label}_compile_ro/ours@{position}"] = round(row["ms"] / ours["ms"], 3)
    rows.append(summary)
    print(json.dumps(summary), flush=True)
    with open(Path(args.out) / "quantized_llm_bench.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"\n{'position':>8} {'variant':16} {'ms/token':>9} {'x bf16':>7} {'x ours':>7} {'MB/step':>8} {'% copy':>7}  "
          f"(medians of {args.calls}; copy {copy['GBps']:.0f} GB/s; x: ms over our bf16 / our same weights)")
    order = list(VARIANTS)
    for (position, label, path), row in sorted(timings.items(), key=lambda i: (i[0][0], i[0][2] != "ours",
                                                                                order.index(i[0][1]))):
        bf16, ours = timings.get((position, "bf16", "ours")), timings.get((position, label, "ours"))
        ratios = [f"{row['ms'] / r['ms']:7.2f}" if r else f"{'-':>7}" for r in (bf16, ours)]
        print(f"{position:8d} {row['variant']:16} {row['ms']:9.3f} {' '.join(ratios)} {row['bytes'] / 1e6:8.1f} "
              f"{100 * row['copy_fraction']:6.1f}%")
    print("ratios: " + ", ".join(f"{k} {v}" for k, v in summary.items() if "/" in k))
    for r in rows:
        if "error" in r:
            print(f"FAILED {r['variant']}: {r['error'][:200]}")
        elif r["variant"].endswith("_check"):
            worst = max(r["logits"], key=lambda x: x["error"] / x["tolerance"])
            print(f"{r['variant']}: {'ok' if r['ok'] else 'NOT OK'}; worst step {worst['step']}: error "
                  f"{worst['error']:.2e} (eager's own {worst['eager_error']:.2e}, tolerance {worst['tolerance']:.2e}, "
                  f"vs eager {worst['error_vs_eager']:.2e}); cache max error {r['state_max_error']:.2e}")


if __name__ == "__main__":
    main()
