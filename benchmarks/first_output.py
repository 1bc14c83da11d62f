#!/usr/bin/env python3
"""Time to first output, measured inside the process: from just after ``import torch`` to the
first synchronized output, for the package and for eager alike.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/first_output.py \\
        transformer_block bert resnet50 --repeats 5 --out $OUT

Each measurement is a fresh process. Before the clock starts, the child imports torch and
loads the model's example inputs (saved by the parent, as CPU tensors), so both sides time
the same thing after that point:
- ``ours``: ``import <package>``, ``load("cuda")``, inputs to the GPU, first call, synchronize;
- ``eager``: import the model file (and what it imports: transformers, timm...), ``get_model()``
  (the file's seeded weights), ``.cuda()``, inputs to the GPU, first forward under
  ``torch.no_grad()``, synchronize.
Both include creating the CUDA context. After the clock stops, the ``ours`` child checks its
output against eager on the same inputs and reports the error (relative L2, worst leaf).
Medians over ``--repeats`` processes per side, alternating; one JSON line per model to
``$OUT/first_output.jsonl`` and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]  # zoo_bench; aotcombo.testing from this checkout

CHILD = r"""
import importlib, importlib.util, json, sys, time
a = json.loads(sys.argv[1])
import torch
inputs = torch.load(a["inputs"])
torch_done = time.perf_counter()


def model_file():
    if a["zoo"]:
        from aotcombo.testing import zoo
        return zoo.model_file(a["model"])
    spec = importlib.util.spec_from_file_location("first_output_model", a["file"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def eager():
    model = model_file().get_model().cuda()
    with torch.no_grad():
        return model(*[t.cuda() for t in inputs])


if a["side"] == "ours":
    package = importlib.import_module(a["package"])
    m = package.load("cuda")
    out = m(*[t.cuda() for t in inputs])
else:
    out = eager()
torch.cuda.synchronize()
seconds = time.perf_counter() - torch_done
result = {"seconds": seconds}
if a["side"] == "ours":
    from torch.utils import _pytree
    from aotcombo.testing.compare import relative_error
    ref = eager()
    errors = [relative_error(g, r) for g, r in zip(_pytree.tree_leaves(out), _pytree.tree_leaves(ref))
              if r.is_floating_point()]
    result["error"] = max(errors) if errors else 0.0
print("RESULT " + json.dumps(result))
"""


def example_inputs(model: str, zoo: bool):
    if zoo:
        from aotcombo.testing.zoo import model_file

        return model_file(model).get_example_inputs()
    import importlib.util

    spec = importlib.util.spec_from_file_location("first_output_inputs", ROOT / "sample_models" / f"{model}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = module.get_example_inputs()
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def run_child(args: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"{args['side']} child failed: {done.stderr[-2000:]}")
    return json.loads(line[len("RESULT "):])


def measure(model: str, repeats: int) -> dict:
    import torch

    from aotcombo.testing.zoo import ZOO, package_name

    zoo = model in ZOO
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inputs.pt"
        torch.save(example_inputs(model, zoo), path)
        base = {"model": model, "zoo": zoo, "inputs": str(path), "file": str(ROOT / "sample_models" / f"{model}.py"),
                "package": package_name(model) if zoo else model}
        runs = {"ours": [], "eager": []}
        errors = []
        for _ in range(repeats):
            for side in ("ours", "eager"):
                result = run_child({**base, "side": side})
                runs[side].append(result["seconds"])
                if "error" in result:
                    errors.append(result["error"])
    row = {"model": model, "repeats": repeats, "worst_error": max(errors)}
    for side, seconds in runs.items():
        row[f"{side}_s"] = round(statistics.median(seconds), 3)
        row[f"{side}_all_s"] = [round(s, 3) for s in seconds]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "out"), help="for first_output.jsonl (default %(default)s)")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    from zoo_bench import run_models

    rows = run_models(args.models, lambda model: measure(model, args.repeats), Path(args.out) / "first_output.jsonl")
    print(f"\n{'model':20} {'ours s':>8} {'eager s':>8}  eager/ours  (time to first output after import torch, "
          "medians)")
    for r in rows:
        if "ours_s" in r:
            print(f"{r['model']:20} {r['ours_s']:8.3f} {r['eager_s']:8.3f}  {r['eager_s'] / r['ours_s']:10.2f}")


if __name__ == "__main__":
    main()
