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
import contextlib
import datetime
import gc
import importlib
import importlib.util
import inspect
import math
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(HERE), str(ROOT)):  # bench_report beside this file; aotcombo.testing from this checkout
    if p not in sys.path:
        sys.path.insert(0, p)

import bench_report  # noqa: E402  (stdlib only; torch is imported in main, after the cache env is set)

SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")
MEMORY_BOUND = {"branches", "adam_step"}
COLD_START_DEFAULT = ("transformer_block", "branches")
VARIANTS = {
    # name: (kind, options)
    "eager": ("eager", {}),
    "compile": ("compile", {}),
    "compile_combo": ("compile", {"options": {"combo_kernels": True}}),
    "compile_ro": ("compile", {"mode": "reduce-overhead"}),
    "aot": ("aot", {"graphs": False, "check_inputs": False}),
    "aot_checked": ("aot", {"graphs": False, "check_inputs": True}),
    "aot_graphs": ("aot", {"graphs": True, "check_inputs": False}),
    "aot_graphs_nocopy": ("aot", {"graphs": True, "check_inputs": False, "copy_outputs": False}),
    "aot_graphs_static": ("aot", {"graphs": True, "check_inputs": False, "copy_outputs": False, "static": True}),
}


class Skip(Exception):
    """A variant that cannot run here (no CUDA, no package, no graphs= in the runtime...)."""


class CompileTimeout(BaseException):
    """Raised by SIGALRM when a torch.compile runs too long. A BaseException: torch's compile
    stack catches Exception in places (a TimeoutError was swallowed there, seen on CPU)."""


class Clock:
    def __init__(self, budget_s: float):
        self.t0, self.budget = time.perf_counter(), budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget - self.elapsed()


CLOCK = Clock(0)


def log(msg: str) -> None:
    print(f"[{CLOCK.elapsed():6.1f}s] {msg}", flush=True)


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str):
    """Raise CompileTimeout in the main thread after ``seconds`` (SIGALRM; no-op elsewhere)."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise CompileTimeout(f"{what} took over {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


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


# ---------------------------------------------------------------------------------- helpers

def load_sample(name: str):
    """The sample model file as a module (a unique name: the wheels are importable as ``name``)."""
    spec = importlib.util.spec_from_file_location(f"_bench_sample_{name}", ROOT / "sample_models" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_params(pkg):
    """Names load() accepts, or None when it takes **kwargs we cannot see through."""
    for fn in (getattr(getattr(pkg, "_package", None), "load", None), getattr(pkg, "load", None)):
        if fn is None:
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return set(params)
    return None


def load_package(pkg, device: str, **wanted):
    """``pkg.load(device, **wanted)`` with what the installed runtime's load() accepts.

    Returns (model, kwargs passed, notes). Raises Skip when graphs=True is asked of a runtime
    without graph mode; drops other unknown options with a note (check_inputs then falls
    back to the Model's ``check_inputs`` attribute)."""
    kwargs, notes = dict(wanted), []

    def drop(k):
        if k == "graphs" and wanted[k]:
            raise Skip("the installed runtime's load() has no graphs=")
        kwargs.pop(k)
        if k != "graphs":  # graphs=False is what a runtime without graph mode does anyway
            notes.append(f"load() has no {k}=")

    params = _load_params(pkg)
    if params is not None:
        for k in [k for k in kwargs if k not in params]:
            drop(k)
    while True:
        try:
            m = pkg.load(device, **kwargs)
            break
        except TypeError as e:
            bad = next((k for k in kwargs if f"'{k}'" in str(e)), None)
            if bad is None:
                raise
            drop(bad)
    if "check_inputs" in wanted and "check_inputs" not in kwargs and hasattr(m, "check_inputs"):
        m.check_inputs = wanted["check_inputs"]
        notes.append(f"set model.check_inputs = {wanted['check_inputs']}")
    return m, kwargs, notes


def _leaves(x):
    from torch.utils import _pytree

    return _pytree.tree_leaves(x)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# ---------------------------------------------------------------------------------- one model

class Bench:
    def __init__(self, args, torch, timing, support, compare):
        self.args, self.torch, self.T, self.S, self.C = args, torch, timing, support, compare
        self.device = torch.device(args.device)
        self.cuda = self.device.type == "cuda"
        self.notes: list[str] = []
        self.warmup_ms, self.rep_ms = (5, 20) if args.quick else (25, 100)

    # -- per-model setup

    def prepare(self, name: str, reserve_s: float) -> dict:
        torch, args = self.torch, self.args
        sample = load_sample(name)
        model = sample.get_model().eval().to(self.device)
        example = [t.to(self.device) for t in sample.get_example_inputs()]
        set_bytes = _nbytes(example)
        l2 = (getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0)
              if self.device.type == "cuda" else 0)
        l2 = l2 or 32 * 2**20
        k = max(2, min(args.max_sets, math.ceil(3 * l2 / set_bytes), max(2, (2 * 2**30) // set_bytes)))
        gen = torch.Generator(device=self.device).manual_seed(args.seed)
        sets = [tuple(self.S.fresh_like(t, gen) for t in example) for _ in range(k)]
        del example
        t0 = time.perf_counter()
        refs = []
        for i in range(2):
            refs.append(model(*sets[i]))
            self.T.sync(self.device)
            if i == 0:
                first_call_s = time.perf_counter() - t0
        outs = _leaves(refs[0])
        weights = _nbytes(list(model.parameters()) + list(model.buffers()))
        info = {
            "n_input_sets": k, "set_bytes": set_bytes, "output_bytes": _nbytes(outs), "weight_bytes": weights,
            "bytes_moved": set_bytes + _nbytes(outs) + weights, "memory_bound": name in MEMORY_BOUND,
            "rotation": f"{k} input sets of {set_bytes / 1e6:.2f} MB rotate call by call "
                        f"({k * set_bytes / 1e6:.1f} MB together; L2 {l2 / 2**20:.0f} MiB)",
        }
        try:
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as fc:
                model(*sets[0])
            info["flops"] = int(fc.get_total_flops())
        except Exception as e:  # FLOPs are a side note
            info["flops"] = None
            self.notes.append(f"{name}: FLOP count failed ({type(e).__name__})")
        return {"name": name, "model": model, "sets": sets, "refs": refs, "info": info,
                "eager_first_call_s": first_call_s, "reserve_s": reserve_s}

    # -- variants

    def build(self, vname: str, ctx: dict):
        """(fn, timing sets, check(x) -> outputs, setup seconds, details) for one variant."""
        torch, kind, opts = self.torch, *VARIANTS[vname]
        model, sets, name = ctx["model"], ctx["sets"], ctx["name"]
        details = {}
        if kind == "eager":
            return model, sets, (lambda x: model(*x)), ctx["eager_first_call_s"], details
        if kind == "compile":
            import torch._inductor.config

            if "options" in opts and not hasattr(torch._inductor.config, "combo_kernels"):
                raise Skip("this torch's inductor config has no combo_kernels")
            left = CLOCK.left() - ctx["reserve_s"]
            if left < 30:
                raise Skip(f"time budget ({left:.0f} s left for in-process work)")
            torch._dynamo.reset()
            cm = torch.compile(model, **opts)
            if opts.get("mode") == "reduce-overhead":
                mark = torch.compiler.cudagraph_mark_step_begin

                def fn(*x):
                    mark()
                    return cm(*x)
            else:
                fn = cm
            skips0 = self._cudagraph_skips()
            t0 = time.perf_counter()
            with time_limit(min(self.args.compile_timeout_s, left), f"torch.compile of {name}"):
                fn(*sets[0])
                self.T.sync(self.device)
            setup = time.perf_counter() - t0
            details["compile_kwargs"] = opts
            if opts.get("mode") == "reduce-overhead":
                for x in sets[:3]:  # the warm-up and recording calls
                    fn(*x)
                skipped = self._cudagraph_skips() - skips0
                if skipped:
                    details["note"] = f"inductor counted {skipped} cudagraph skip(s): may run without graphs"
            return fn, sets, (lambda x: fn(*x)), setup, details
        # aotcombo
        if not self.cuda:
            raise Skip("needs CUDA")
        try:
            pkg = importlib.import_module(name)
        except ImportError as e:
            raise Skip(f"package {name} not importable ({e}); install the wheels on PYTHONPATH") from None
        if not hasattr(pkg, "load"):
            raise Skip(f"module {name} ({getattr(pkg, '__file__', '?')}) is not an aotcombo package")
        t0 = time.perf_counter()
        m, kwargs, notes = load_package(pkg, str(self.device), **{k: v for k, v in opts.items() if k != "static"})
        details.update(load_kwargs=kwargs, package_file=getattr(pkg, "__file__", None))
        if notes:
            details["note"] = "; ".join(notes)
        if opts.get("static"):
            if not hasattr(m, "static_inputs"):
                raise Skip("the installed runtime's Model has no static_inputs()")
            static = tuple(m.static_inputs())
            if len(static) != len(sets[0]):
                raise RuntimeError(f"static_inputs() gave {len(static)} tensors, the model takes {len(sets[0])}")

            def check(x):
                for s, t in zip(static, x):
                    s.copy_(t)
                return m(*static)

            check(sets[0])
            self.T.sync(self.device)
            return m, [static], check, time.perf_counter() - t0, details
        m(*sets[0])
        self.T.sync(self.device)
        return m, sets, (lambda x: m(*x)), time.perf_counter() - t0, details

    @staticmethod
    def _note(r: dict, text: str) -> None:
        r["note"] = f"{r['note']}; {text}" if r.get("note") else text

    def _cudagraph_skips(self) -> int:
        try:
            from torch._dynamo.utils import counters

            return int(counters["inductor"].get("cudagraph_skips", 0))
        except Exception:
            return 0

    def run_variant(self, vname: str, ctx: dict) -> dict:
        args, T, dev = self.args, self.T, self.device
        r = {"label": bench_report.LABELS.get(vname, vname), "status": "ok"}
        fn = None
        try:
            log(f"{ctx['name']} / {vname}: building")
            fn, tsets, check, setup, details = self.build(vname, ctx)
            r.update(details, setup_s=setup)
            # correct first: every variant against eager, on two fresh input sets
            if vname != "eager":
                worst, tol = 0.0, None
                for i, ref in enumerate(ctx["refs"]):
                    out = check(ctx["sets"][i])
                    T.sync(dev)
                    for err, t in self.C.compare(out, ref):
                        tol = t if tol is None else min(tol, t)
                        if not err <= t:  # NaN fails too
                            r.update(status="FAILED", max_error=err, tolerance=t,
                                     reason=f"relative L2 error {err:.2e} > {t:.0e} on input set {i}")
                            log(f"{ctx['name']} / {vname}: FAILED: {r['reason']}")
                            return r
                        worst = max(worst, err)
                    del out
                r.update(max_error=worst, tolerance=tol)
            # time
            t_est = T.warm_up(fn, tsets, dev, calls=3 if args.quick else 5, seconds=0.02 if args.quick else 0.1)
            n_min = 3 if (args.quick and not self.cuda) else 20
            n = int(max(n_min, min(2000, args.target_s / max(t_est, 1e-6))))
            r["wall_ms"] = T.time_synced(fn, tsets, dev, n)
            batch = int(max(1, min(50, 0.002 / max(t_est, 1e-6))))
            n_batches = int(max(3 if args.quick else 10, min(200, args.target_s / (batch * max(t_est, 1e-6)))))
            r["b2b_ms"] = T.time_back_to_back(fn, tsets, dev, batch, n_batches)
            if self.cuda:
                # each of these may fail on its own without losing the wall-clock numbers
                try:
                    r["do_bench_ms"] = T.do_bench_ms(fn, tsets, self.warmup_ms, self.rep_ms)
                except Exception as e:
                    self._note(r, f"do_bench failed: {type(e).__name__}: {str(e)[:150]}")
                try:
                    r["gpu_kernels"] = self.S.gpu_kernel_launches(fn, *tsets[0])
                except Exception as e:
                    self._note(r, f"gpu_kernel_launches failed: {type(e).__name__}: {str(e)[:150]}")
                try:
                    cross = T.host_launch_calls(fn, tsets[0], dev, calls=5 if t_est < 1e-3 else 2)
                    host = cross["host"]
                    r["host_launch_calls"] = (None if host is None
                                              else (int(host) if host == int(host) else round(host, 1)))
                    r["launch_crosscheck"] = cross
                    if r.get("gpu_kernels") is not None and cross["gpu_kernels"] != r["gpu_kernels"]:
                        self._note(r, f"profiler cross-check: {cross['gpu_kernels']:g} GPU kernels/call over "
                                      f"{cross['calls']} calls in one session vs {r['gpu_kernels']} for one call")
                except Exception as e:
                    self._note(r, f"host launch count failed: {type(e).__name__}: {str(e)[:150]}")
            log(f"{ctx['name']} / {vname}: wall {r['wall_ms']['median']:.4f} ms (n={n}), back-to-back "
                f"{r['b2b_ms']['median']:.4f} ms, do_bench {bench_report.fmt_ms(r.get('do_bench_ms'))} ms, "
                f"{r.get('gpu_kernels', '—')} GPU kernels, setup {setup:.2f} s"
                + (f", err {r['max_error']:.1e}" if "max_error" in r else ""))
        except Skip as e:
            r.update(status="skipped", reason=str(e))
            log(f"{ctx['name']} / {vname}: skipped: {e}")
        except (Exception, CompileTimeout) as e:  # a failing variant is reported, never fatal
            r.update(status="FAILED", reason=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}",
                     traceback=traceback.format_exc()[-3000:])
            log(f"{ctx['name']} / {vname}: FAILED: {r['reason']}")
        finally:
            del fn
            if VARIANTS[vname][0] == "compile":
                self.torch._dynamo.reset()
            gc.collect()
            if self.cuda:
                self.torch.cuda.empty_cache()
        return r

    def run_model(self, name: str, variants: list[str], reserve_s: float) -> dict:
        log(f"== {name}: preparing inputs")
        ctx = self.prepare(name, reserve_s)
        info = ctx["info"]
        log(f"{name}: {info['rotation']}; bytes moved per forward {info['bytes_moved'] / 1e6:.2f} MB"
            + (f", {info['flops'] / 1e9:.2f} GFLOP" if info.get("flops") else ""))
        result = {**info, "variants": {}}
        for v in variants:
            result["variants"][v] = self.run_variant(v, ctx)
        if result["variants"].get("eager", {}).get("status") == "ok":
            again = self.T.time_synced(ctx["model"], ctx["sets"], self.device,
                                       result["variants"]["eager"]["wall_ms"]["n"])
            first = result["variants"]["eager"]["wall_ms"]["median"]
            result["eager_repeat_ms"] = again
            spread = abs(again["median"] - first) / first
            result["eager_repeat_spread"] = spread
            log(f"{name}: eager timed again: {again['median']:.4f} ms vs {first:.4f} ms ({100 * spread:.1f}% apart)")
        del ctx
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()
        return result


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


# ---------------------------------------------------------------------------------- re-render / demo

def render_only(args) -> int:
    import json

    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        results = demo_results()
    md, notes = bench_report.write_all(results, args.out)
    for n in notes:
        print(n, flush=True)
    print(md, flush=True)
    return 0


def demo_results() -> dict:
    """Fabricated numbers in the shape bench.py writes: for checking the report's layout."""
    rng = random.Random(0)
    base = {"branches": 0.45, "transformer_block": 0.25, "adam_step": 9.0, "conv_block": 0.12}
    factor = {"eager": 1, "compile": 0.4, "compile_combo": 0.3, "compile_ro": 0.35, "aot": 0.1,
              "aot_checked": 0.15, "aot_graphs": 0.06, "aot_graphs_nocopy": 0.055, "aot_graphs_static": 0.05}
    kernels = {"eager": 96, "compile": 24, "compile_combo": 2, "compile_ro": 24, "aot": 1, "aot_checked": 1,
               "aot_graphs": 3, "aot_graphs_nocopy": 2, "aot_graphs_static": 1}
    models = {}
    for name, b in base.items():
        vs = {}
        for v, f in factor.items():
            w = b * f * (0.9 + 0.2 * rng.random())
            vs[v] = {"label": bench_report.LABELS[v], "status": "ok", "setup_s": 20.0 if "compile" in v else 0.3,
                     "wall_ms": {"median": w, "n": 200}, "b2b_ms": {"median": w * 0.7}, "do_bench_ms": w * 0.8,
                     "gpu_kernels": kernels[v],
                     "host_launch_calls": 1 if "graphs" in v or v == "compile_ro" else kernels[v],
                     "max_error": 0.0 if v == "eager" else 3e-3, "tolerance": 1e-2}
        models[name] = {"variants": vs,
                        "bytes_moved": 4e6 if name == "branches" else 2.7e8 if name == "adam_step" else 2e7,
                        "memory_bound": name in MEMORY_BOUND, "floor_us": 5.0, "floor_bound": "memory"}
    models["conv_block"]["variants"]["compile_combo"] = {"status": "FAILED",
                                                         "reason": "relative L2 error 3.1e-02 > 1e-02 on input set 0",
                                                         "max_error": 3.1e-2, "tolerance": 1e-2, "setup_s": 12.0}
    models["adam_step"]["variants"]["aot_graphs_static"] = {
        "status": "skipped", "reason": "the installed runtime's Model has no static_inputs()"}
    for name in COLD_START_DEFAULT:
        models[name]["cold_start"] = {
            "eager": {"status": "ok", "median_s": 1.1, "runs": [{}] * 3, "setup_s": 0.4, "inputs_s": 0.1,
                      "first_call_s": 0.5},
            "aotcombo": {"status": "ok", "median_s": 0.6, "runs": [{}] * 3, "setup_s": 0.3, "inputs_s": 0.1,
                         "first_call_s": 0.1},
            "torch.compile cold cache": {"status": "ok", "median_s": 31.0, "runs": [{}], "setup_s": 1.0,
                                         "inputs_s": 0.1,
                                         "first_call_s": 29.0, "note": "cache after: 120 files, 3.1 MB"},
            "torch.compile warm cache": {"status": "ok", "median_s": 6.5, "runs": [{}] * 3, "setup_s": 1.0,
                                         "inputs_s": 0.1,
                                         "first_call_s": 5.2},
        }
    return {"demo": True, "meta": {"device_name": "NVIDIA H100 80GB HBM3 (DEMO)", "torch": "2.11", "triton": "3.6",
                                   "driver": "demo", "date": "demo"},
            "settings": {"budget_s": 450}, "elapsed_s": 0.0, "models": models,
            "copy_bandwidth": {"GBps": 2900.0, "bytes": 2 * 2**30},
            "matmul_rate": {"TFLOPs": 700.0, "dtype": "bfloat16", "n": 8192},
            "import_torch": {"median_s": 1.8, "runs": [1.8] * 5},
            "notes": ["DEMO: fabricated numbers."]}


if __name__ == "__main__":
    sys.exit(main())
