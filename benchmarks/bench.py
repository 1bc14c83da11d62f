#!/usr/bin/env python3
"""aotcombo against eager and torch.compile, side by side, in one run on one GPU.

    PYTHONPATH=<site with the sample wheels>:. PYTHONUNBUFFERED=1 \\
        python3 benchmarks/bench.py --out out/bench

For every sample model (sample_models/*.py, default shapes) and variant (eager;
torch.compile default, combo_kernels, reduce-overhead; the installed aotcombo package
plain, with input checks, in graph mode with and without output copies, graph mode on its
static inputs): check the
output against eager on fresh random inputs, then time it (synchronized wall clock,
each call and back to back; triton's do_bench) and count its kernels per forward.
Then fresh-process time to first output (eager, torch.compile cold and warm cache,
aotcombo). Writes results.json, results.md, latency.png and cold_start.png to --out
and prints the markdown report last. ``--device cpu --quick`` smoke-tests all of it
that needs no GPU. benchmarks/README.md says what is measured and how.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(HERE), str(ROOT)):  # the bench_* modules beside this file; aotcombo.testing from this checkout
    if p not in sys.path:
        sys.path.insert(0, p)

# the bench_* modules are stdlib only: torch is imported in main, after the cache env is set
import bench_report  # noqa: E402
from bench_clock import CLOCK, log  # noqa: E402
from bench_render_only import render_only  # noqa: E402
from bench_runner import Bench  # noqa: E402
from bench_variants import COLD_START_DEFAULT, SAMPLES, VARIANTS  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="benchmarks/README.md says what each number means.")
    ap.add_argument("--models", default=",".join(SAMPLES), help=f"comma-separated, from {', '.join(SAMPLES)}")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (smoke test: no do_bench, "
                                                    "no launch counts, no aotcombo)")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench"), help="output folder (default %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help="few calls, few input sets, 1 cold-start run each: a smoke test")
    ap.add_argument("--skip-cold-start", action="store_true", help="no fresh-process measurements")
    ap.add_argument("--cold-start-models", default=",".join(COLD_START_DEFAULT),
                    help="models for the fresh-process measurements (default %(default)s), or 'all'")
    ap.add_argument("--all-cold-start", action="store_true", help="same as --cold-start-models all")
    ap.add_argument("--budget-s", type=float, default=450,
                    help="stop starting new work after this many seconds (default %(default)s)")
    ap.add_argument("--compile-timeout-s", type=float, default=240, help="limit for one torch.compile (first call)")
    ap.add_argument("--target-s", type=float, default=None,
                    help="seconds of timed calls per timer (default 0.3, quick 0.05)")
    ap.add_argument("--max-sets", type=int, default=None,
                    help="most input sets to rotate through (default 64, quick 4)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--from-json", metavar="RESULTS_JSON", help="re-render the report from a results.json into --out")
    ap.add_argument("--report-demo", action="store_true", help="write a report of FABRICATED numbers (layout check)")
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.variants = [v for v in args.variants.split(",") if v]
    bad = [m for m in args.models if m not in SAMPLES] + [v for v in args.variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown model or variant: {', '.join(bad)}")
    cs = args.cold_start_models
    args.cold_start_models = list(SAMPLES) if args.all_cold_start or cs == "all" else [m for m in cs.split(",") if m]
    args.target_s = args.target_s or (0.05 if args.quick else 0.3)
    args.max_sets = args.max_sets or (4 if args.quick else 64)
    return args


# ---------------------------------------------------------------------------------- run

def meta(torch, device) -> dict:
    m = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "python": platform.python_version(), "torch": torch.__version__, "argv": sys.argv[1:],
         "host": platform.node(), "cpus": os.cpu_count(),
         "env": {k: os.environ.get(k) for k in ("TEARDOWN_CUPTI", "DISABLE_CUPTI_LAZY_REINIT", "PYTHONPATH",
                                                 "CUDA_VISIBLE_DEVICES")}}
    try:
        import triton

        m["triton"] = triton.__version__
    except ImportError:
        m["triton"] = None
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        m.update(device_name=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                 memory_gib=round(p.total_memory / 2**30, 1), l2_mib=getattr(p, "L2_cache_size", 0) / 2**20,
                 cuda=torch.version.cuda)
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
                                "temperature.gpu,power.draw,power.limit", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10).stdout.strip().splitlines()
            if q:
                m["driver"] = q[0].split(",")[0].strip()
                m["nvidia_smi"] = q[0]
        except Exception:
            pass
    else:
        m["device_name"] = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    try:
        m["git"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                  text=True, timeout=5).stdout.strip() or None
    except Exception:
        m["git"] = None
    return m


def estimate_s(args, cuda: bool) -> float:
    # torch.compile: ~10-40 s per cold compile on the GPU box (the figure); reduce-overhead
    # after the default variant reuses its Triton kernels from the cache
    compile_s = {"compile": 20, "compile_combo": 20, "compile_ro": 8}
    per_model = sum(compile_s.get(v, 2) for v in args.variants) + 5
    # cold start per model: compile cold ~30 s, warm 3 × ~7 s, eager and aotcombo 3 × ~3 s each
    cold = 0 if args.skip_cold_start else len(cold_models(args)) * (30 + 21 + 18) + 15
    return 10 + len(args.models) * per_model + cold


def cold_models(args) -> list[str]:
    return [m for m in args.cold_start_models if m in args.models]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json or args.report_demo:
        return render_only(args)
    CLOCK.__init__(args.budget_s)
    # the in-process torch.compile variants start from an empty cache: set before torch is imported
    inductor_tmp = tempfile.mkdtemp(prefix="bench_inductor_main_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_tmp
    os.environ["TRITON_CACHE_DIR"] = os.path.join(inductor_tmp, "triton")
    import torch

    from aotcombo.testing import compare, gpu, timing as bench_timing

    torch.set_grad_enabled(False)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"--device {args.device}: torch.cuda is not available here; use --device cpu for a smoke test",
              file=sys.stderr)
        return 2
    if device.type == "cuda":
        if device.index is None:  # "cuda" -> "cuda:N", the current device: set_device needs an index
            device = torch.device("cuda", torch.cuda.current_device())
            args.device = str(device)
        torch.cuda.set_device(device)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    results = {"meta": meta(torch, device), "settings": {k: v for k, v in vars(args).items()}, "models": {},
               "notes": []}
    est = estimate_s(args, device.type == "cuda")
    log(f"device {results['meta'].get('device_name')}, torch {torch.__version__}; models {args.models}; "
        f"variants {args.variants}; estimated {est:.0f} s, budget {args.budget_s:.0f} s")
    if est > args.budget_s:
        log("estimate exceeds the budget: what does not fit is skipped and marked so (cold start last)")
    bench = Bench(args, torch, bench_timing, gpu, compare)
    out_md = None
    try:
        # ceilings
        try:
            big = 2**28 if args.quick or device.type != "cuda" else 2**30
            results["copy_bandwidth"] = bench_timing.copy_bandwidth(device, big, bench.warmup_ms, bench.rep_ms)
            log(f"copy bandwidth {results['copy_bandwidth']['GBps']:.0f} GB/s (read+write, {big / 2**30:.2f} GiB)")
            if device.type == "cuda":
                n = 4096 if args.quick else 8192
                results["matmul_rate"] = bench_timing.matmul_rate(device, n, torch.bfloat16, bench.warmup_ms,
                                                                  bench.rep_ms)
                log(f"bf16 matmul {results['matmul_rate']['TFLOPs']:.0f} TFLOP/s (n={n})")
        except Exception as e:
            results["notes"].append(f"ceiling measurement failed: {type(e).__name__}: {e}")
        torch.cuda.empty_cache() if device.type == "cuda" else None
        # in-process: latency, launches, correctness
        cms = [] if args.skip_cold_start else cold_models(args)
        # compile variants for every model come first; keep a minute for a partial cold start
        reserve = 0 if not cms else (30 if args.quick else 60)
        for name in args.models:
            try:
                results["models"][name] = bench.run_model(name, args.variants, reserve)
            except Exception as e:
                log(f"{name}: FAILED before its variants: {type(e).__name__}: {e}")
                results["models"][name] = {"variants": {}, "error": f"{type(e).__name__}: {e}",
                                           "traceback": traceback.format_exc()[-3000:]}
            m = results["models"][name]
            if m.get("bytes_moved") and results.get("copy_bandwidth"):
                mem_us = m["bytes_moved"] / (results["copy_bandwidth"]["GBps"] * 1e9) * 1e6
                mm = (results.get("matmul_rate") or {}).get("TFLOPs")
                flop_us = m["flops"] / (mm * 1e12) * 1e6 if m.get("flops") and mm else 0.0
                m["floor_us"], m["floor_bound"] = max(mem_us, flop_us), ("memory" if mem_us >= flop_us else "compute")
        # fresh processes
        if cms:
            try:
                import torch._inductor.async_compile as ac

                ac.shutdown_compile_workers()  # idle compile workers out of the way of the children
            except Exception:
                pass
            if device.type == "cuda":
                torch.cuda.empty_cache()
            import bench_coldstart

            cs = bench_coldstart.ColdStart(str(device), ROOT, CLOCK, log, args.quick)
            log(f"== cold start: {cms} ({CLOCK.left():.0f} s left)")
            cs.import_torch(2 if args.quick else 3)
            per_model = {}
            has_compile = any(VARIANTS[v][0] == "compile" for v in args.variants)
            for name in cms:
                per_model[name] = cs.measure_model(
                    name, ROOT / "sample_models" / f"{name}.py", reps=1 if args.quick else 3,
                    warm_reps=1 if args.quick else 3, do_aot=device.type == "cuda" and any(
                        v.startswith("aot") for v in args.variants), compile_kwargs={} if has_compile else None)
            cs.import_torch(1 if args.quick else 2)
            cs.finish(per_model)
            results["import_torch"] = cs.import_summary()
            for name, r in per_model.items():
                results["models"].setdefault(name, {"variants": {}})["cold_start"] = r
            skipped = [m for m in args.models if m not in cms]
            if skipped:
                results["notes"].append(f"cold start measured for {', '.join(cms)} only (--all-cold-start for all): "
                                        f"each torch.compile cold run costs ~10-60 s")
    finally:
        results["elapsed_s"] = CLOCK.elapsed()
        results["notes"] = general_notes(results, args) + results["notes"] + bench.notes
        import shutil

        shutil.rmtree(inductor_tmp, ignore_errors=True)
        out_md, notes = bench_report.write_all(results, args.out)
        for n in notes:
            log(n)
        log(f"wrote {', '.join(results['files'].values())}")
        print("\n" + out_md, flush=True)
    return 0


def general_notes(results: dict, args) -> list[str]:
    notes = []
    rot = [f"{n}: {m['rotation']}" for n, m in results["models"].items() if m.get("rotation")]
    if rot:
        notes.append("Inputs: fresh random (aotcombo.testing.gpu.fresh_like: normal at the example's scale, uniform "
                     "for non-negative tensors; never zeros), drawn once per set; " + "; ".join(rot) +
                     ". Weights stay resident for every variant. 'aot graphs static' times one set held in "
                     "the model's static_inputs() (no rotation, no copy-in; copy_outputs=False where accepted).")
    notes.append("Correctness: each variant's outputs against eager on two of those input sets (relative L2 "
                 "error, aotcombo.testing.compare.compare: bf16/fp16 ≤ 1e-2, fp32 ≤ 1e-4) before it is timed; "
                 "a failing variant is FAILED and not timed.")
    notes.append("torch.compile variants in this process start from an empty TORCHINDUCTOR_CACHE_DIR, so "
                 "'setup+1st call' is a cold compile (later variants of a model may reuse Triton kernels "
                 "compiled by earlier ones); aotcombo's is load() + first call; eager's is its first call.")
    spreads = [(n, m["eager_repeat_spread"]) for n, m in results["models"].items() if "eager_repeat_spread" in m]
    if spreads:
        notes.append("Noise: eager timed again after the other variants: " + ", ".join(
            f"{n} {100 * s:.1f}%" for n, s in spreads) + " apart; differences smaller than that are noise.")
    for n, m in results["models"].items():
        for v, r in m.get("variants", {}).items():
            if r.get("note"):
                notes.append(f"{n} / {v}: {r['note']}")
    if args.quick:
        notes.append("--quick: few calls and at most 4 input sets: numbers are a smoke test, not a measurement.")
    return notes


if __name__ == "__main__":
    sys.exit(main())
