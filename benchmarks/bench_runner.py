"""One sample model under each of bench.py's variants in this process: fresh input sets, each variant
checked against eager, then timed (wall clock each call and back to back, do_bench) and its kernels
counted. torch comes in through ``Bench``'s arguments: nothing here imports it at import time.
"""

from __future__ import annotations

import gc
import importlib
import math
import time
import traceback

import bench_goals
from bench_clock import CLOCK, CompileTimeout, log, time_limit
from bench_variants import MEMORY_BOUND, VARIANTS, Skip, load_package, load_sample


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
        r = {"label": bench_goals.LABELS.get(vname, vname), "status": "ok"}
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
                f"{r['b2b_ms']['median']:.4f} ms, do_bench {bench_goals.fmt_ms(r.get('do_bench_ms'))} ms, "
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
