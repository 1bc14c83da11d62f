"""Timing and counting: synchronized wall clock, do_bench, host launch calls, ceilings.

Every timer takes ``sets``, a list of input tuples, and rotates through them call by
call, so that inputs bigger together than the L2 are not served from it.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _summary(xs: list[float]) -> dict:
    xs = sorted(xs)

    def q(p):
        return xs[min(len(xs) - 1, int(p * len(xs)))]

    return {"median": statistics.median(xs), "p10": q(0.10), "p90": q(0.90), "min": xs[0], "n": len(xs)}


def warm_up(fn, sets, device, calls: int, seconds: float) -> float:
    """Call ``fn`` at least ``calls`` times and for at least ``seconds``, every set at
    least once (up to 64 calls); return one synchronized call's time in seconds (median of 3)."""
    t_end = time.perf_counter() + seconds
    for i in itertools.count():
        if i >= max(calls, min(len(sets), 64)) and time.perf_counter() >= t_end:
            break
        fn(*sets[i % len(sets)])
    sync(device)
    est = []
    for i in range(3):
        x = sets[i % len(sets)]
        t0 = time.perf_counter()
        fn(*x)
        sync(device)
        est.append(time.perf_counter() - t0)
    return statistics.median(est)


def time_synced(fn, sets, device, n: int) -> dict:
    """ms per call, each call timed alone: sync; t0; fn(x); sync; t1 (median over n)."""
    times = []
    k = len(sets)
    sync(device)
    for i in range(n):
        x = sets[i % k]
        t0 = time.perf_counter()
        fn(*x)
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return _summary(times)


def time_synced_interleaved(fns: list, sets_per_fn: list, device, n: int) -> list[dict]:
    """``time_synced`` for several functions at once, call by call in turn (A B A B ...), so
    that a drift in the machine's speed (clocks, a busy host) weighs on each alike."""
    times = [[] for _ in fns]
    sync(device)
    for i in range(n):
        for k, (fn, sets) in enumerate(zip(fns, sets_per_fn)):
            x = sets[i % len(sets)]
            t0 = time.perf_counter()
            fn(*x)
            sync(device)
            times[k].append((time.perf_counter() - t0) * 1e3)
    return [_summary(t) for t in times]


def time_back_to_back(fn, sets, device, batch: int, n_batches: int) -> dict:
    """ms per call, calls back to back: sync; t0; batch calls; sync; t1; (t1-t0)/batch,
    median over n_batches batches."""
    per_call = []
    k = len(sets)
    j = 0
    for _ in range(n_batches):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(batch):
            fn(*sets[j % k])
            j += 1
        sync(device)
        per_call.append((time.perf_counter() - t0) * 1e3 / batch)
    return {**_summary(per_call), "batch": batch}


def do_bench_ms(fn, sets, warmup_ms: int, rep_ms: int) -> float:
    """triton.testing.do_bench median (ms), the inputs rotating call by call."""
    import triton.testing

    cycle = itertools.cycle(sets)
    return float(triton.testing.do_bench(lambda: fn(*next(cycle)), warmup=warmup_ms, rep=rep_ms,
                                         return_mode="median"))


_HOST_LAUNCH_PREFIXES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cuGraphLaunch",
                         "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel")


def host_launch_calls(fn, args, device, calls: int = 5) -> dict:
    """Kernel and graph launch API calls the host makes per call of ``fn`` (runtime and driver
    API events, as the torch profiler records them), over ``calls`` warm calls in one session.

    Also the GPU kernel events per call in that same session (memcpy/memset excluded): a
    cross-check of aotcombo.testing.gpu.gpu_kernel_launches, which profiles a single call (a
    session can lose kernel records at its start). ``host`` is None when no launch API event
    was seen at all."""
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        sync(device)
    events = prof.events()
    counts = Counter(e.name for e in events if e.name.startswith(_HOST_LAUNCH_PREFIXES))
    kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                  and "memcpy" not in e.name.lower() and "memset" not in e.name.lower())
    total = sum(counts.values())
    return {"host": (total / calls) if total else None, "detail": {k: v / calls for k, v in counts.items()},
            "gpu_kernels": kernels / calls, "calls": calls}


def copy_bandwidth(device, nbytes: int, warmup_ms: int, rep_ms: int) -> dict:
    """Device-to-device copy of an ``nbytes`` tensor; bytes counted = read + write."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    if device.type == "cuda":
        ms = do_bench_ms(lambda: dst.copy_(src), [()], warmup_ms, rep_ms)
        how = "do_bench median"
    else:
        ms = time_synced(lambda: dst.copy_(src), [()], device, 5)["median"]
        how = "wall median of 5"
    moved = 2 * src.numel() * src.element_size()
    return {"bytes": moved, "ms": ms, "GBps": moved / (ms * 1e-3) / 1e9, "how": how}


def matmul_rate(device, n: int, dtype, warmup_ms: int, rep_ms: int) -> dict:
    """A large n×n×n matmul on random data (the ceiling for the matrix-bound models)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    ms = do_bench_ms(lambda: a @ b, [()], warmup_ms, rep_ms)
    return {"n": n, "dtype": str(dtype).replace("torch.", ""), "ms": ms, "TFLOPs": 2 * n**3 / (ms * 1e-3) / 1e12}


def gpu_us(fn, calls: int = 100) -> float:
    """Median GPU time of ``fn()`` in us (CUDA events around each call)."""
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)
