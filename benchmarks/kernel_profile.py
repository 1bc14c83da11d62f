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
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--compiled", action="store_true", help="also torch.compile's kernels (default mode)")
    args = parser.parse_args()
    for name in args.models:
        package, sets, eager, weights = resolve(name)
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
