"""Several batch sizes: a dynamic-batch package against a bucketed one, side by side in one run.

    PYTHONPATH=<site with the wheels>:. python benchmarks/shapes_bench.py [--out DIR]

For each sample and batch size (1, 8, 32), per-call wall time (synchronized, median over
rotating fresh input sets) of: eager; ``<sample>_buckets`` (a graph per bucket) and
``<sample>_dynamic`` (a graph per batch size seen) in graph mode, with the inputs written
into the graph's static inputs and the outputs read from its static outputs
(``copy_outputs=False``: the serving path) and with fresh inputs and outputs copied, and
both op by op (the dynamic one computing its grids per call); with ``--compile``, also
``torch.compile(dynamic=True, mode="reduce-overhead")``, the reference (its compile and
per-size recording happen in the first call at each size, reported apart). Ratios are
against the bucketed graph mode with fresh inputs. Also the wheel sizes of 6 buckets against 1, read from
the manifests of the installed packages when the ``*_b1`` wheels are there, else from
``--wheels``. Wheels: ``scripts/build_wheels.py``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout

from aotcombo.builder.inputs import shapes  # noqa: E402
from aotcombo.builder.inputs.modelfile import batch_inputs_function, load_model_file  # noqa: E402
from aotcombo.testing.compare import compare  # noqa: E402
from aotcombo.testing.gpu import SAMPLES, fresh_like  # noqa: E402
from aotcombo.testing.timing import time_synced, warm_up  # noqa: E402

SIZES = (1, 8, 32)
SETS = 4


def measure(fn, sets, device, calls: int = 200) -> float:
    warm_up(fn, sets, device, calls=20, seconds=0.2)
    return time_synced(fn, sets, device, calls)["median"]


def _reference(samples: str) -> dict:
    """torch.compile's numbers, measured by this script in a child process of its own."""
    import subprocess

    child = subprocess.run([sys.executable, __file__, "--reference-only", "--samples", samples],
                           capture_output=True, text=True)
    lines = [line for line in child.stdout.splitlines() if line.startswith("REFERENCE ")]
    if child.returncode or not lines:
        print(f"torch.compile reference failed ({child.returncode}): {(child.stdout + child.stderr)[-2000:]}")
        return {"rows": {}, "first_call": {}}
    data = json.loads(lines[-1][len("REFERENCE "):])
    return {"rows": {(m, b): t for m, b, t in data["rows"]},
            "first_call": {(m, b): t for m, b, t in data["first_call"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--samples", default=",".join(SAMPLES))
    parser.add_argument("--runners", help="comma-separated runner labels to keep (default: all)")
    parser.add_argument("--compile", action="store_true",
                        help="add torch.compile(dynamic=True, mode='reduce-overhead'), the reference: one dynamic "
                        "compile per model, a CUDA graph recorded per batch size; measured in a child process")
    parser.add_argument("--reference-only", action="store_true",
                        help="measure eager and torch.compile only (what --compile runs in its child process)")
    args = parser.parse_args()
    if args.reference_only:
        args.compile, args.runners = True, "compile_dynamic_ro"
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows, first_call = [], {}
    for name in args.samples.split(","):
        path = ROOT / "sample_models" / f"{name}.py"
        model, example = load_model_file(path)
        model = model.to(device)
        make = batch_inputs_function(path)
        _, batched = shapes.example_inputs_by_size(example, [2, 3], make)
        runners, serving = {"eager": lambda *x: model(*x)}, {}
        if not args.reference_only:
            buckets = importlib.import_module(f"{name}_buckets")
            dynamic = importlib.import_module(f"{name}_dynamic")
            runners.update({
                "buckets_graph": buckets.load("cuda"),
                "dynamic_graph": dynamic.load("cuda"),  # a graph per batch size
                "buckets_op_by_op": buckets.load("cuda", graphs=False),
                "dynamic_op_by_op": dynamic.load("cuda", graphs=False),
            })
            serving = {"buckets_graph": buckets.load("cuda", copy_outputs=False),
                       "dynamic_graph": dynamic.load("cuda", copy_outputs=False)}
        elif args.compile:
            # Its own process: replaying CUDA graphs captured outside torch.compile (ours, or a plain
            # torch.cuda.CUDAGraph) after its cudagraph trees record a new dynamic size failed with
            # torch 2.11 (benchmarks/probe_cudagraph_trees.py), so the two never share a process here.
            torch._dynamo.reset()
            compiled = torch.compile(model, dynamic=True, mode="reduce-overhead")

            def compiled_ro(*x, compiled=compiled):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(*x)

            runners["compile_dynamic_ro"] = compiled_ro
        if args.runners:
            keep = {"eager", *args.runners.split(",")}
            runners = {k: v for k, v in runners.items() if k in keep}
            serving = {k: v for k, v in serving.items() if k in keep}
        generator = torch.Generator(device=device).manual_seed(7)
        for size in SIZES:
            made = make(size) if make is not None else shapes.cut_or_tile(example, batched, size)
            sets = [[fresh_like(t.to(device), generator) for t in made] for _ in range(SETS)]
            with torch.no_grad():
                ref = model(*sets[0])
                for label, run in runners.items():
                    if label == "compile_dynamic_ro":  # the compile (first size) or the recording, timed
                        started = time.perf_counter()
                        run(*sets[0])
                        torch.cuda.synchronize()
                        first_call[(name, size)] = time.perf_counter() - started
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
            base = times.get("buckets_graph") or times["eager"]
            print(f"{name:18s} batch {size:3d}: " + "  ".join(
                f"{k} {v:.3f} ms ({v / base:.2f}x)" for k, v in times.items()), flush=True)
    if args.compile and not args.reference_only:
        reference = _reference(args.samples)
        for r in rows:
            r["compile_dynamic_ro"] = reference["rows"].get((r["model"], r["batch"]), float("nan"))
        first_call.update(reference["first_call"])
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
    if args.reference_only:
        print("REFERENCE " + json.dumps({"rows": [[r["model"], r["batch"], r["compile_dynamic_ro"]] for r in rows],
                                         "first_call": [[n, b, t] for (n, b), t in first_call.items()]}))
        return
    columns = ["eager", "buckets_graph_static", "dynamic_graph_static", "buckets_graph", "dynamic_graph",
               "buckets_op_by_op", "dynamic_op_by_op"] + (["compile_dynamic_ro"] if args.compile else [])
    if first_call:
        print("torch.compile(dynamic=True, mode='reduce-overhead'), first call per size (compile, recording): "
              + ", ".join(f"{n} {b}: {t:.1f} s" for (n, b), t in first_call.items()))
    print("\nms per call (median). Ratios: dynamic / buckets, graph with static inputs (the serving path)"
          + ("; torch.compile dynamic reduce-overhead / aotcombo dynamic, graph with static inputs" if args.compile
             else ""))
    ratios = ["dynamic / buckets"] + (["compile / dynamic"] if args.compile else [])
    print("| model | batch | " + " | ".join(c.replace("_", " ") for c in columns + ratios) + " |")
    print("|---|---|" + "---|" * (len(columns) + len(ratios)))
    nan = float("nan")
    for r in rows:
        values = ([r.get(c, nan) for c in columns]
                  + [r.get("dynamic_graph_static", nan) / r.get("buckets_graph_static", nan)])
        if args.compile:
            values.append(r.get("compile_dynamic_ro", nan) / r.get("dynamic_graph_static", nan))
        print(f"| {r['model']} | {r['batch']} | " + " | ".join(f"{v:.3f}" for v in values[:len(columns)])
              + " | " + " | ".join(f"{v:.2f}" for v in values[len(columns):]) + " |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "shapes_bench.json").write_text(json.dumps(
            {"device": torch.cuda.get_device_name(), "rows": rows, "package_bytes": sizes,
             "compile_first_call_s": {f"{n} {b}": t for (n, b), t in first_call.items()}}, indent=1))


if __name__ == "__main__":
    main()
