#!/usr/bin/env python3
"""Where a synchronized call's time goes beyond its kernels: the host's part, and the GPU's clocks and power
when calls come back to back. Per package, default call (graph mode), after a warm-up:

- ``wall``: perf_counter around the call and a synchronize (as ``axes_bench.py`` and ``zoo_bench.py`` time);
  ``events``: CUDA events around the call; ``host``: the call's return alone (the host's part, the GPU's
  work still queued); medians of 100 calls, the GPU resting between none of them;
- ``sustained``: calls back to back for ``--seconds``, each synchronized, ms a call, with nvidia-smi's SM
  clock, power draw, temperature and active throttle reasons sampled every 0.2 s (0x4: the software power
  cap). A call whose GPU time grows here while the host's part does not is bound by the power cap.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/sustained_clocks.py bert_dyn@32x512 full/bert_base

``bert_dyn@BxS``: ``full_bert_base_dyn`` (``scripts/build_axes.py``) at axes_bench's inputs of that shape;
other names as ``zoo_bench.py`` takes them.

H100, torch 2.11, 2026-12-06: dynamic BERT-base at 32 x 512 wall 6.848 ms, events 6.784, host 0.114;
sustained 6.977 ms a call at 688-694 W, 1545-1695 MHz, reason 0x4 (the same package's kernels took 6.26 ms of
a 6.30 ms replay after 10 ms of rest, torch's profiler); at 8 x 128 wall 0.743, events 0.704, host 0.075,
sustained 0.721 at 533-544 W, 1980 MHz, no reason.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402

QUERY = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"


def resolve(name: str) -> tuple:
    """(the loaded default call, input sets) of a name on the command line."""
    if name.startswith("bert_dyn@"):
        from axes_bench import input_sets

        from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file
        batch, seq = (int(v) for v in name.removeprefix("bert_dyn@").split("x"))
        weights = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda").state_dict()
        return import_package("full_bert_base_dyn").load("cuda", weights=weights), input_sets(batch, seq)
    from zoo_bench import resolve as zoo_resolve

    package, sets, _, weights = zoo_resolve(name)
    return package.load("cuda", weights=weights), sets


def sample_smi(stop: threading.Event, rows: list) -> None:
    while not stop.is_set():
        rows.append(subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True).stdout.strip())
        time.sleep(0.2)


def measure(fn, sets: list, seconds: float) -> dict:
    for i in range(20):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    wall, events, host = [], [], []
    for i in range(100):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn(*sets[i % len(sets)])
        end.record()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        events.append(start.elapsed_time(end))
        host.append((t1 - t0) * 1e3)
    stop, smi = threading.Event(), []
    sampler = threading.Thread(target=sample_smi, args=(stop, smi))
    sampler.start()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        fn(*sets[calls % len(sets)])
        torch.cuda.synchronize()
        calls += 1
    elapsed = time.perf_counter() - t0
    stop.set()
    sampler.join()
    return {"wall": statistics.median(wall), "events": statistics.median(events), "host": statistics.median(host),
            "sustained": elapsed * 1e3 / calls, "smi": smi[len(smi) // 4:]}  # past the first quarter: settled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--seconds", type=float, default=4.0, help="of calls back to back (default 4)")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), torch.__version__, f"({QUERY})", flush=True)
    with torch.no_grad():
        for name in args.models:
            fn, sets = resolve(name)
            r = measure(fn, sets, args.seconds)
            print(f"{name}: wall {r['wall']:.3f} ms, events {r['events']:.3f}, host {r['host']:.3f}; "
                  f"sustained {r['sustained']:.3f} ms a call; nvidia-smi: {'; '.join(r['smi'][:6])}", flush=True)
            del fn
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
