#!/usr/bin/env python3
"""Where the default call's time goes: the same package loaded several ways, one run.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/call_breakdown.py branches transformer_block

Per model, synchronized wall clock per call (median of ``--calls``), all in this process:
- ``default``: ``load("cuda")``, four input sets rotating (the kernels re-pointed each call);
- ``same_inputs``: the same, one input set every call (no re-pointing);
- ``unchecked``: ``check_inputs=False``, input sets rotating;
- ``static_outputs``: ``copy_outputs=False``, input sets rotating;
- ``static``: ``m(*m.static_inputs())`` with ``copy_outputs=False`` (the serving path).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.timing import gpu_us  # noqa: E402
from zoo_bench import measure, sample  # noqa: E402


def breakdown(name: str, calls: int) -> dict:
    package = import_package(name)
    _, sets = sample(name)
    row = {"model": name}
    with torch.no_grad():
        for label, options, inputs in (("default", {}, sets), ("same_inputs", {}, sets[:1]),
                                       ("unchecked", {"check_inputs": False}, sets),
                                       ("static_outputs", {"copy_outputs": False}, sets)):
            row[label] = measure(package.load("cuda", **options), inputs, calls)
        static = package.load("cuda", copy_outputs=False)
        for dst, src in zip(static.static_inputs(), sets[0]):
            dst.copy_(src)
        row["static"] = measure(static, [static.static_inputs()], calls)
    return row


def host_us(fn, calls: int = 400) -> float:
    """Median host time of ``fn()`` in us, the GPU synchronized every 20 calls (so no queue fills)."""
    times = []
    for i in range(calls):
        if i % 20 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


_kept: list = [None]


def keep(outputs) -> None:
    """Hold ``outputs`` until the next call's, as ``y = m(x)`` in a loop does."""
    _kept[0] = outputs


def _bound_to(package, inputs):
    """A graph bound to ``inputs`` that writes the main graph's outputs (``copy_outputs=False``)."""
    loaded = package.load("cuda", graphs=True, copy_outputs=False)
    for _ in range(4):
        loaded(*inputs)
    return next(iter(loaded._bound._graphs.values()))


def pieces(name: str) -> str:
    """Host time of the default call's pieces on a graph bound to its inputs, against the static call's."""
    from aotcombo.runtime.bound import _data_ptr

    package = import_package(name)
    _, sets = sample(name)
    inputs = tuple(sets[0])
    with torch.no_grad():
        loaded = package.load("cuda", graphs=True)
        for _ in range(4):
            loaded(*inputs)
        bound, slots = loaded._bound, loaded._slots
        graph = next(iter(bound._graphs.values()))
        static = package.load("cuda", graphs=True, copy_outputs=False)
        held = static.static_inputs()
        row = {"accepts": host_us(lambda: bound.accepts(inputs)),
               "pointers": host_us(lambda: tuple(map(_data_ptr, inputs)))}
        same = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
        if same is not None:  # the alternative bound.py's docstring weighs: one C++ call comparing them
            listed, pointers, indices = list(inputs), list(map(_data_ptr, inputs)), list(range(len(inputs)))
            row["pointers compared in C++"] = host_us(lambda: same(listed, pointers, indices))
        row["free slot"] = host_us(slots.free)
        kept = loaded(*inputs)  # the caller holds the last call's outputs, as y = m(x) does
        row["free slot, last held"] = host_us(slots.free)
        del kept
        row.update({"bound replay": host_us(graph.replay), "main replay": host_us(static._graph.replay),
                    "bound replay on the GPU": gpu_us(graph.replay),
                    "main replay on the GPU": gpu_us(static._graph.replay),
                    "bound replay on the GPU, static outputs": gpu_us(_bound_to(package, inputs).replay),
                    "default call": host_us(lambda: loaded(*inputs)),
                    "default call, y = m(x)": host_us(lambda: keep(loaded(*inputs))),
                    "static call": host_us(lambda: static(*held))})
    return f"{name} ({len(inputs)} inputs, {len(slots.sources)} outputs; host us, medians): " + ", ".join(
        f"{k} {v:.1f}" for k, v in row.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--pieces", action="store_true", help="print the host time of the default call's pieces")
    args = parser.parse_args()
    if args.pieces:
        for name in args.models:
            print(pieces(name), flush=True)
        return
    print(f"{'model':20} " + " ".join(f"{k:>15}" for k in ("default", "same_inputs", "unchecked", "static_outputs",
                                                          "static")) + "  (ms, medians)")
    for name in args.models:
        r = breakdown(name, args.calls)
        print(f"{name:20} " + " ".join(f"{r[k]:15.4f}" for k in ("default", "same_inputs", "unchecked",
                                                               "static_outputs", "static")), flush=True)


if __name__ == "__main__":
    main()
