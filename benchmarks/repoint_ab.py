#!/usr/bin/env python3
"""The main graph's two ways with fresh inputs, A/B in one process: re-pointing the kernel nodes
at the caller's tensors (``runtime/repoint.py``) against copying them into the static inputs.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/repoint_ab.py [MODEL ...] [--calls N]

Per sample: two graph-mode loads of one package, one with its re-pointer turned off; both are
called through the main graph's path (``GraphModel.replay_checked``: bound graphs, which
would take recurring inputs first, left out) on 8 input sets of fresh tensors, call by call in
turn. Prints ms per call (median, synchronized) and the ratio copy / re-point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # zoo_bench; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.compare import leaves  # noqa: E402
from aotcombo.testing.gpu import SAMPLES, fresh_like, import_package  # noqa: E402
from aotcombo.testing.timing import time_synced_interleaved, warm_up  # noqa: E402


def main_graph_path(model):
    """``model``'s call through the main graph (the replay of fresh, exact inputs)."""
    return lambda *inputs: model.replay_checked(inputs, True, True)


def ab(name: str, calls: int) -> dict:
    package = import_package(name)
    repointed, copied = package.load("cuda", graphs=True), package.load("cuda", graphs=True)
    for m in (repointed, copied):
        m.capture()
    copied._repoint = None  # the copy path: every input copied into the static inputs
    device = torch.device("cuda")
    generator = torch.Generator(device="cuda").manual_seed(401)
    sets = [[fresh_like(t, generator) for t in repointed.static_inputs()] for _ in range(8)]
    fns = [main_graph_path(repointed), main_graph_path(copied)]
    with torch.no_grad():
        same = all(torch.equal(a, b) for a, b in zip(leaves(fns[0](*sets[0])), leaves(fns[1](*sets[0]))))
        for fn in fns:
            warm_up(fn, sets, device, calls=5, seconds=0.2)
        point, copy = (s["median"] for s in time_synced_interleaved(fns, [sets, sets], device, calls))
    inputs = len(sets[0])
    direct = len(repointed._repoint.inputs) if repointed._repoint is not None else 0
    return {"model": name, "inputs": inputs, "read_in_place": direct, "repoint_ms": point, "copy_ms": copy,
            "copy_over_repoint": copy / point, "same_outputs": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(SAMPLES))
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'model':20} {'inputs':>6} {'in place':>8} {'re-point ms':>11} {'copy ms':>8} {'copy/re-point':>13}")
    for name in args.models:
        r = ab(name, args.calls)
        print(f"{r['model']:20} {r['inputs']:6d} {r['read_in_place']:8d} {r['repoint_ms']:11.3f} {r['copy_ms']:8.3f} "
              f"{r['copy_over_repoint']:12.2f}x" + ("" if r["same_outputs"] else "  OUTPUTS DIFFER"))


if __name__ == "__main__":
    main()
