"""Cold start of a built package: fresh process to first correct output, minus ``import torch``.

    python benchmarks/cold_start.py [transformer_block] [--repeats 5] [--out cold_start.json]

Each run is a new ``python -c`` process (the package on PYTHONPATH). The parent notes the
wall clock (time.time(): one clock for all processes of the machine) just before spawning;
the child prints the wall clock after each phase. Reported per mode (graph: load captures
the CUDA graph; op_by_op: graphs=False), as medians over the repeats:

  import torch      spawn -> ``import torch`` done (the interpreter too)
  import package    ``import <name>``: the runtime and the manifest (goal: <= 50 ms)
  load              ``<name>.load("cuda", ...)``: CUDA context, kernels, weights (+ capture)
  first output      inputs made, first call, synchronized
  total - torch     spawn -> first output, minus ``import torch`` alone (goal: <= 0.3 s)

and the load split ("detail" runs, which make the CUDA context first and then take the
runtime's steps one by one): context, kernels (cuModuleLoadData), weights (torch.load),
program (import), capture (warm-up + capture; graph mode). Every child checks its first
output against the eager model of sample_models/<name>.py, after the timed part.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
a = json.loads(sys.argv[1])
T = {}
import torch
T["import_torch"] = time.time()
if a["kind"] != "import":
    import importlib
    package = importlib.import_module(a["name"])
    T["import_package"] = time.time()
    options = {"graphs": a["graphs"]}
    if a["kind"] == "detail":
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        T["context"] = time.time()
        rt = package._package
        runtime = sys.modules[type(rt).__module__]
        index = torch.cuda.current_device()
        rt._device(index)  # the variant for this GPU, its primary context, the weights
        torch.cuda.synchronize()
        T["weights"] = time.time()
        loaded = rt._load(index, None)  # kernel images into the context, the program module
        T["kernels_program"] = time.time()
        model = runtime.Model(loaded)
        if a["graphs"]:
            model = runtime.GraphModel.capture(model)
        T["capture"] = time.time()
    else:
        model = package.load("cuda", **options)
    torch.cuda.synchronize()
    T["load"] = time.time()
    inputs = []
    for s in package.manifest.inputs:
        t = torch.empty_strided(s.shape, s.stride, dtype=getattr(torch, s.dtype), device="cuda")
        inputs.append(t.uniform_() if t.is_floating_point() else t.zero_())
    out = model(*inputs)
    torch.cuda.synchronize()
    T["first_output"] = time.time()
    import importlib.util
    spec = importlib.util.spec_from_file_location("sample", a["sample"])
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    with torch.no_grad():
        ref = sample.get_model().eval().cuda()(*inputs)
    got, want = torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(ref)
    errors = [float((g.double() - r.double()).norm() / r.double().norm().clamp_min(1e-30)) for g, r in zip(got, want)]
    T["max_error"] = max(errors) if len(got) == len(want) else float("inf")
print("COLD " + json.dumps(T), flush=True)
"""

PHASES = ["import_package", "load", "first_output"]
DETAIL = ["context", "weights", "kernels_program", "capture", "load", "first_output"]


def run_child(args: dict) -> dict:
    """One fresh process; its marks as seconds since the spawn."""
    spawn = time.time()
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                       env=dict(os.environ), timeout=600)
    lines = [line for line in p.stdout.splitlines() if line.startswith("COLD ")]
    if p.returncode or not lines:
        raise RuntimeError(f"child {args} failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    marks = json.loads(lines[-1][5:])
    return {k: (v - spawn if k != "max_error" else v) for k, v in marks.items()}


def median_runs(args: dict, repeats: int) -> dict:
    runs = [run_child(args) for _ in range(repeats)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", default="transformer_block")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    a = parser.parse_args(argv)
    sample = str(ROOT / "sample_models" / f"{a.name}.py")
    base = {"name": a.name, "sample": sample}
    torch_alone = median_runs({**base, "kind": "import", "graphs": None}, a.repeats)["import_torch"]
    result = {"name": a.name, "import_torch_s": torch_alone, "modes": {}}
    print(f"{a.name}: import torch alone {torch_alone * 1e3:.0f} ms (spawn to done, median of {a.repeats})")
    for mode, graphs in (("graph", True), ("op_by_op", False)):
        user = median_runs({**base, "kind": "user", "graphs": graphs}, a.repeats)
        detail = median_runs({**base, "kind": "detail", "graphs": graphs}, a.repeats)
        steps = {p: user[p] - user[q] for p, q in zip(PHASES, ["import_torch"] + PHASES)}
        split = {p: detail[p] - detail[q] for p, q in zip(DETAIL, ["import_package"] + DETAIL)}
        total = user["first_output"] - torch_alone
        result["modes"][mode] = {"marks": user, "steps_s": steps, "total_minus_torch_s": total,
                                 "detail_steps_s": split, "max_error": max(user["max_error"], detail["max_error"])}
        print(f"\n{mode}: spawn to first output {user['first_output'] * 1e3:.0f} ms, "
              f"minus import torch: {total * 1e3:.0f} ms (goal 300); max relative error "
              f"{result['modes'][mode]['max_error']:.1e}")
        print("  " + "  ".join(f"{p} {v * 1e3:.1f} ms" for p, v in steps.items()))
        print("  detail: " + "  ".join(f"{p} {v * 1e3:.1f}" for p, v in split.items()) + " (ms)")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
