"""Several batch sizes: a dynamic-batch package against a bucketed one, side by side in one run.

    PYTHONPATH=<site with the wheels>:.:tests python benchmarks/shapes_bench.py [--out DIR]

For each sample and batch size (1, 8, 32), per-call wall time (synchronized, median over
rotating fresh input sets) of: eager; ``<sample>_buckets`` (a graph per bucket) and
``<sample>_dynamic`` (a graph per batch size seen) in graph mode, with the inputs written
into the graph's static inputs and the outputs read from its static outputs
(``copy_outputs=False``: the serving path) and with fresh inputs and outputs copied, and
both op by op (the dynamic one computing its grids per call). Ratios are against the
bucketed graph mode with fresh inputs. Also the wheel sizes of 6 buckets against 1, read from
the manifests of the installed packages when the ``*_b1`` wheels are there, else from
``--wheels``. Wheels: ``scripts/build_wheels.py``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from bench_timing import time_synced, warm_up  # noqa: E402
from gpu_support import SAMPLES, compare, fresh_like  # noqa: E402

from aotcombo import shapes  # noqa: E402
from aotcombo.modelfile import batch_inputs_function, load_model_file  # noqa: E402

SIZES = (1, 8, 32)
SETS = 4


def measure(fn, sets, device, calls: int = 200) -> float:
    warm_up(fn, sets, device, calls=20, seconds=0.2)
    return time_synced(fn, sets, device, calls)["median"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", default=",".join(SAMPLES))
    args = parser.parse_args()
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for name in args.samples.split(","):
        path = ROOT / "sample_models" / f"{name}.py"
        model, example = load_model_file(path)
        model = model.to(device)
        make = batch_inputs_function(path)
        _, batched = shapes.example_inputs_by_size(example, [2, 3], make)
        buckets = importlib.import_module(f"{name}_buckets")
        dynamic = importlib.import_module(f"{name}_dynamic")
        runners = {
            "eager": lambda *x: model(*x),
            "buckets_graph": buckets.load("cuda"),
            "dynamic_graph": dynamic.load("cuda"),  # a graph per batch size
            "buckets_op_by_op": buckets.load("cuda", graphs=False),
            "dynamic_op_by_op": dynamic.load("cuda", graphs=False),
        }
        serving = {"buckets_graph": buckets.load("cuda", copy_outputs=False),
                   "dynamic_graph": dynamic.load("cuda", copy_outputs=False)}
        generator = torch.Generator(device=device).manual_seed(7)
        for size in SIZES:
            made = make(size) if make is not None else shapes.cut_or_tile(example, batched, size)
            sets = [[fresh_like(t.to(device), generator) for t in made] for _ in range(SETS)]
            with torch.no_grad():
                ref = model(*sets[0])
                for label, run in runners.items():
                    if label != "eager":
                        worst = max(e / t for e, t in compare(run(*sets[0]), ref) if t)
                        assert worst <= 1.0, f"{name} {label} batch {size}: error over tolerance"
                times = {label: measure(run, sets, device) for label, run in runners.items()}
                for label, run in serving.items():  # inputs written in place, outputs read in place
                    static = run.static_inputs(size)
                    for target, source in zip(static, sets[0]):
                        target.copy_(source)
                    times[f"{label}_static"] = measure(run, [static], device)
            row = {"model": name, "batch": size, **{k: round(v, 4) for k, v in times.items()}}
            rows.append(row)
            base = times["buckets_graph"]
            print(f"{name:18s} batch {size:3d}: " + "  ".join(
                f"{k} {v:.3f} ms ({v / base:.2f}x)" for k, v in times.items()), flush=True)
    sizes = {}
    for name in args.samples.split(","):
        for suffix in ("buckets", "b1", "dynamic"):
            try:
                package = importlib.import_module(f"{name}_{suffix}")
            except ImportError:
                continue
            folder = Path(package.__file__).parent
            sizes[f"{name}_{suffix}"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    if sizes:
        print("installed package bytes: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))
    columns = ["eager", "buckets_graph_static", "dynamic_graph_static", "buckets_graph", "dynamic_graph",
               "buckets_op_by_op", "dynamic_op_by_op"]
    print("\nms per call (median); last column: dynamic op by op / buckets graph, both with static inputs")
    print("| model | batch | " + " | ".join(c.replace("_", " ") for c in columns) + " | ratio |")
    print("|---|---|" + "---|" * (len(columns) + 1))
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | " + " | ".join(f"{r[c]:.3f}" for c in columns)
              + f" | {r['dynamic_op_by_op'] / r['buckets_graph_static']:.2f} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "shapes_bench.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                                 "rows": rows, "package_bytes": sizes}, indent=1))


if __name__ == "__main__":
    main()
