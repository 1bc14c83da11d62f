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
libraries: cuBLAS, cuDNN, flash attention and the rest), and per kernel. With ``--compiled``,
reduce-overhead's (``torch.compile(mode="reduce-overhead")``) the same way.
"""

from __future__ import annotations

import argparse
import collections
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


def print_replay(title: str, replay: list, top: int | None = None) -> None:
    """``replay``'s span, kernels, gaps and time by source, then per kernel (the ``top`` largest)."""
    start = replay[0].time_range.start
    span = replay[-1].time_range.end - start
    sums, counts, sources, gaps, end = (collections.defaultdict(float), collections.Counter(),
                                        collections.defaultdict(float), 0.0, start)
    for e in replay:
        gaps += max(0.0, e.time_range.start - end)
        end = max(end, e.time_range.end)
        us = e.time_range.end - e.time_range.start
        sums[e.name] += us
        counts[e.name] += 1
        sources[source_of(e.name)] += us
    said = ", ".join(f"{name} {us:.1f}" for name, us in sorted(sources.items(), key=lambda kv: -kv[1]))
    print(f"\n{title}: span {span:.1f} us, {len(replay)} kernels, gaps {gaps:.1f} us; by source (us) {said} "
          f"({torch.cuda.get_device_name()})")
    for name, us in sorted(sums.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{us:8.1f} us {counts[name]:3d}x {us / counts[name]:6.2f} us  {name[:90]}")


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
    args = parser.parse_args()
    for name in args.models:
        package, sets, eager, weights = resolve(name)
        if args.replay:
            with torch.no_grad():
                print_replay(f"{name}, ours", median_replay(package.load("cuda", weights=weights), sets[0], args.calls),
                             top=20)
                if args.compiled:
                    compiled = torch.compile(eager, mode="reduce-overhead")

                    def reduce_overhead(*x):
                        torch.compiler.cudagraph_mark_step_begin()
                        return compiled(*x)
                    print_replay(f"{name}, reduce-overhead", median_replay(reduce_overhead, sets[0], args.calls),
                                 top=20)
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
