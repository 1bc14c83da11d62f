#!/usr/bin/env python3
"""Where a package's GPU time goes: each kernel of one forward, from torch's profiler.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/kernel_profile.py MODEL ...

MODEL: a zoo model (sample_models/zoo/), ``MODEL@BATCH`` or a sample, as for
``zoo_bench.py``. The package runs op by op
(``graphs=False``: the kernels a graph replay runs, each visible to the profiler) on the
file's example inputs; per model, the GPU time of each kernel per forward (mean of
``--calls``), largest first, and the total. ``--compiled``: torch.compile's (default mode, no
CUDA graphs, so each kernel shows) beside it. A kernel launched early (programmatic dependent
launch, sm_90: one that follows another of ours) starts while the one before it runs and waits
for it on the GPU: its time here includes that wait, so a chain of ours reads longer than it runs
(``benchmarks/quant_gemv_bench.py`` times GEMVs alone; ``aotcombo build --no-pdl`` for a profile).

``--replay``: the default call instead (graph mode), each of ``--calls`` calls after 10 ms of rest; the
median call's span (first kernel's start to last one's end), its kernels, the gaps where none ran,
their time by source (ours: the package's kernels; Inductor's Triton kernels; copies and memsets;
libraries: cuBLAS, cuDNN, flash attention and the rest), and per kernel, each kernel's time as its share of
the span (what it ran past the kernels before it: a kernel launched early, waiting on the GPU, is not
counted twice). With ``--compiled``, reduce-overhead's (``torch.compile(mode="reduce-overhead")``) the
same way, and the ratio of the spans beside its ceiling: reduce-overhead's span over the share of ours
that is library kernels (cuBLAS, cuDNN) whatever else ours did.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from zoo_bench import resolve  # noqa: E402


def profiled(model, inputs, calls: int, warmups: int = 5, rest_s: float = 0.0):
    """torch's profiler (CUDA) over ``calls`` calls of ``model(*inputs)`` after ``warmups``; with
    ``rest_s``, each call is synchronized and followed by that much rest (the GPU idle before the next)."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(warmups):
            model(*inputs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                model(*inputs)
                if rest_s:
                    torch.cuda.synchronize()
                    time.sleep(rest_s)
            torch.cuda.synchronize()
    return prof


def median_replay(model, inputs, calls: int) -> list:
    """The CUDA kernels of the median (by span) of ``calls`` calls, each after 10 ms of rest."""
    prof = profiled(model, inputs, calls, warmups=20, rest_s=0.01)
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    replays = [[kernels[0]]]
    for before, e in zip(kernels, kernels[1:]):
        if e.time_range.start - before.time_range.end > 3000:  # the rest between calls
            replays.append([])
        replays[-1].append(e)
    return sorted(replays, key=lambda r: r[-1].time_range.end - r[0].time_range.start)[len(replays) // 2]


def source_of(kernel: str) -> str:
    if kernel.startswith("combo_"):
        return "ours"
    if kernel.startswith("triton_"):
        return "Inductor"
    return "copies" if kernel.startswith(("Memcpy", "Memset")) else "libraries"


def print_replay(title: str, replay: list, top: int | None = None) -> dict:
    """``replay``'s span, kernels, gaps and time by source, then per kernel (the ``top`` largest); returns
    the span and each source's share of it (us).

    A kernel's share of the span is the time it ran alone past the kernels before it: a kernel launched
    early (PDL) starts while the one before still runs and waits for it, so its own duration counts
    that wait twice. The shares and the gaps sum to the span; a kernel's duration is printed beside."""
    start = replay[0].time_range.start
    span = replay[-1].time_range.end - start
    sums, shares, counts, sources, gaps, end = (collections.defaultdict(float), collections.defaultdict(float),
                                                collections.Counter(), collections.defaultdict(float), 0.0, start)
    for e in replay:
        gaps += max(0.0, e.time_range.start - end)
        share = max(0.0, e.time_range.end - max(end, e.time_range.start))
        end = max(end, e.time_range.end)
        sums[e.name] += e.time_range.end - e.time_range.start
        shares[e.name] += share
        counts[e.name] += 1
        sources[source_of(e.name)] += share
    said = ", ".join(f"{name} {us:.1f}" for name, us in sorted(sources.items(), key=lambda kv: -kv[1]))
    print(f"\n{title}: span {span:.1f} us, {len(replay)} kernels, gaps {gaps:.1f} us; share of the span by "
          f"source (us) {said} ({torch.cuda.get_device_name()})")
    print(f"{'share':>8}    {'n':>3}  {'each':>6}  {'duration':>8}")
    for name, us in sorted(shares.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{us:8.1f} us {counts[name]:3d}x {us / counts[name]:6.2f} {sums[name]:8.1f}  {name[:90]}")
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "span_us": span, "gaps_us": gaps,
            "kernels": len(replay),
            **{f"{source}_us": us for source, us in sources.items()}}


def kernel_table(model, inputs, calls: int) -> list[tuple[str, int, float]]:
    """(kernel, launches per call, us per call) of ``model(*inputs)``, largest first."""
    prof = profiled(model, inputs, calls)
    rows = [(e.key, e.count // calls, e.device_time_total / calls) for e in prof.key_averages()
            if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--compiled", action="store_true", help="also torch.compile's kernels (default mode; "
                                                                "with --replay, reduce-overhead)")
    parser.add_argument("--replay", action="store_true", help="the default call's graph replay, calls after rest")
    parser.add_argument("--out", help="with --replay, a folder for kernel_profile_replay.jsonl (a line a model "
                                          "appended: span, gaps and shares by source, reduce-overhead's under "
                                          "reduce_overhead)")
    parser.add_argument("--top", type=int, default=20, help="with --replay, the kernels shown per call (largest "
                                                            "share first)")
    args = parser.parse_args()
    for name in args.models:
        package, sets, eager, weights = resolve(name)
        if args.replay:
            with torch.no_grad():
                ours = print_replay(f"{name}, ours", median_replay(package.load("cuda", weights=weights), sets[0],
                                                                   args.calls), top=args.top)
                if args.compiled:
                    compiled = torch.compile(eager, mode="reduce-overhead")

                    def reduce_overhead(*x):
                        torch.compiler.cudagraph_mark_step_begin()
                        return compiled(*x)
                    theirs = print_replay(f"{name}, reduce-overhead", median_replay(reduce_overhead, sets[0],
                                                                                    args.calls), top=args.top)
                    ceiling = (f"; ceiling {theirs['span_us'] / ours['libraries_us']:.2f}x (its span over the library "
                               f"kernels' share of ours)" if ours.get("libraries_us") else "")
                    print(f"{name}: reduce-overhead / ours {theirs['span_us'] / ours['span_us']:.2f}x by span{ceiling}")
                    ours["reduce_overhead"] = theirs
                if args.out:
                    Path(args.out).mkdir(parents=True, exist_ok=True)
                    with open(Path(args.out) / "kernel_profile_replay.jsonl", "a") as f:
                        f.write(json.dumps({"model": name, **ours}) + "\n")
            continue
        runs = [("ours", package.load("cuda", graphs=False, weights=weights))]
        if args.compiled:
            runs.append(("torch.compile", torch.compile(eager)))
        for label, model in runs:
            rows = kernel_table(model, sets[0], args.calls)
            print(f"{name}, {label}: {sum(r[2] for r in rows):.1f} us of GPU kernels per forward, "
                  f"{sum(r[1] for r in rows)} kernels", flush=True)
            for key, count, us in rows:
                print(f"{us:8.1f} us {count:4d}x  {key[:110]}")


if __name__ == "__main__":
    main()
