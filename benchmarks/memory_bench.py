#!/usr/bin/env python3
"""The GPU memory a call takes, and its time, for BERT-base packages side by side in one
process: the buffers' peak in an op-by-op call, the memory pool a captured graph keeps, and the
default call's median (``plan/memory.py``: buffers made at first use, released after last).

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/memory_bench.py PACKAGE ... [--shapes 8x128,32x512]

PACKAGEs: BERT-base packages of ``sample_models/full_size/bert_base.py`` built ``--weights
external`` (a static one at 8 x 128, or ``--dynamic batch=1:32,seq=1:512``), e.g. the same build
of two commits under two ``--name``s. Each takes the weights of the file's model made here; the
inputs are ``axes_bench.input_sets``. Per package and shape: a fresh load, one op-by-op call's
peak (``torch.cuda.max_memory_allocated`` above what was allocated before it), the pool its
graph holds after capture (``torch.cuda.memory_reserved`` before and after, cache emptied),
then the default calls of all packages timed in turn (synchronized wall clock, medians).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import torch  # noqa: E402

from axes_bench import input_sets  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.timing import time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

MB = 1e6


def op_by_op_peak(package, weights, inputs) -> float:
    model = package.load("cuda", graphs=False, weights=weights)
    model(*inputs)  # first call: cuBLAS and attention workspaces, kept by torch after it
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    model(*inputs)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / MB


def graph_pool(package, weights, sets) -> tuple[float, object]:
    model = package.load("cuda", weights=weights)
    model(*sets[0])  # op by op (loads, attention without cuDNN's plan): outside the measure
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    for inputs in sets * 4:  # past its capture (the 8th call of a size, or a static package's 2nd)
        model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the op-by-op calls' blocks: what stays is the graph's
    return (torch.cuda.memory_reserved() - before) / MB, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("packages", nargs="+")
    parser.add_argument("--shapes", default="8x128", help="batch x seq, comma separated")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    weights = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda").state_dict()
    packages = {name: import_package(name) for name in args.packages}
    rows = []
    with torch.no_grad():
        for shape in args.shapes.split(","):
            batch, seq = map(int, shape.split("x"))
            sets = input_sets(batch, seq)
            row, models = {"batch": batch, "seq": seq, "device": torch.cuda.get_device_name(),
                           "torch": torch.__version__}, []
            for name, package in packages.items():
                row[f"{name}_op_by_op_mb"] = round(op_by_op_peak(package, weights, sets[0]), 1)
                torch.cuda.empty_cache()
                pool, model = graph_pool(package, weights, sets)
                row[f"{name}_graph_pool_mb"] = round(pool, 1)
                models.append(model)
            for model in models:
                warm_up(model, sets, device, calls=5, seconds=0.2)
            for name, timed in zip(packages, time_synced_interleaved(models, [sets] * len(models), device,
                                                                       args.calls)):
                row[f"{name}_ms"] = timed["median"]
            print(json.dumps(row), flush=True)
            rows.append(row)
            del models
            torch.cuda.empty_cache()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"\n{'package':>28} {'batch x seq':>11} {'op-by-op peak MB':>16} {'graph pool MB':>13} {'ms':>8}")
    for r in rows:
        for name in packages:
            print(f"{name:>28} {r['batch']:>5} x {r['seq']:<4} {r[f'{name}_op_by_op_mb']:16.1f} "
                  f"{r[f'{name}_graph_pool_mb']:13.1f} {r[f'{name}_ms']:8.3f}")


if __name__ == "__main__":
    main()
