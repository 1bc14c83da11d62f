#!/usr/bin/env python3
"""Where a tensor-parallel decode step's time goes: each kernel of one step on rank 0, from torch's
profiler, in graph mode (the serving path: kernels replayed from the CUDA graph), beside the
one-GPU package's, under ``torchrun --nproc-per-node N`` on one host.

Per kernel: launches per step and GPU microseconds per step (mean over ``--calls``), largest
first; per family (collectives, our fused linears, attention, the rest) the sums; and the step's
wall time. Under programmatic dependent launch a kernel starts before its predecessor ends and
waits at its first dependent read, so durations overlap: their sum can pass the step's time, and
a kernel's own time is an upper bound. A collective's time includes its wait for the other ranks.

    PYTHONPATH=<site with the packages>:. torchrun --nproc-per-node 2 benchmarks/tp_profile.py \\
        --model llama_8b_decode
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.parallel import init_rank  # noqa: E402
from aotcombo.testing.timing import time_synced, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

POSITION = 512
FAMILIES = (("collective", ("nccl", "all_reduce", "allreduce", "all_gather", "one_shot")),
            ("linear", ("fused_linear",)), ("attention", ("attention", "attn", "flash", "fmha")))


def family(name: str) -> str:
    low = name.lower()
    return next((f for f, words in FAMILIES if any(w in low for w in words)), "other")


def profile(model, inputs, calls: int) -> list[tuple[str, int, float]]:
    """(kernel, launches per step, us per step) of ``calls`` steps, largest first."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            model(*inputs)
        torch.cuda.synchronize()
    rows = [(e.key, e.count // calls, e.device_time_total / calls) for e in prof.key_averages()
            if e.device_time_total > 0 and e.count >= calls]
    return sorted(rows, key=lambda r: -r[2])


def report(label: str, rows, step_ms: float, top: int) -> None:
    sums = defaultdict(float)
    for key, _, us in rows:
        sums[family(key)] += us
    busy = sum(sums.values())
    print(f"\n{label}: step {step_ms * 1e3:.1f} us, kernel durations {busy:.1f} us "
          f"({sum(r[1] for r in rows)} launches, overlapping under PDL); "
          + ", ".join(f"{f} {us:.1f}" for f, us in sorted(sums.items(), key=lambda kv: -kv[1])), flush=True)
    for key, count, us in rows[:top]:
        print(f"{us:8.1f} us {count:4d}x {us / max(count, 1):7.2f} us each  {family(key):10s} {key[:90]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama_8b_decode", help="a file of sample_models/full_size")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    rank, world, device = init_rank()
    source = model_file(args.model, FULL_SIZE_DIR)
    eager = source.get_model(device=device)
    weights = eager.state_dict()
    inputs = tuple(t.to(device) for t in source.get_example_inputs(pos=POSITION, seed=0))
    with torch.no_grad():
        ours = import_package(f"full_{args.model}_tp{world}").load(device, weights=weights, copy_outputs=False)
        warm_up(ours, [inputs], device, 20, 0.0)  # a fixed count: every rank makes the same collectives
        step = time_synced(ours, [inputs], device, 50)["median"]
        rows = profile(ours, inputs, args.calls)
        if rank == 0:
            report(f"{args.model}, TP={world}, rank 0, graph mode", rows, step, args.top)
        dist.barrier()
        if rank == 0:
            one = import_package(f"full_{args.model}").load(device, weights=weights, copy_outputs=False)
            warm_up(one, [inputs], device, 20, 0.5)
            step = time_synced(one, [inputs], device, 50)["median"]
            report(f"{args.model}, one GPU, graph mode", profile(one, inputs, args.calls), step, args.top)
        dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # no teardown: destroying the group after a run has hung on two H100s (tp_bench)


if __name__ == "__main__":
    main()
