"""The weight-only quantized decode step (sample_models/quantized_decode.py): the package (graph
mode) against torch.compile's CUDA-graph mode ("reduce-overhead", Inductor dequantizing per call)
and eager, per batch, calls interleaved (A B C A B C ...), synchronized wall clock per call.

    PYTHONPATH=$SITE python benchmarks/quantized_bench.py [--out DIR]

Packages quantized_int8 and quantized_int4 (scripts/build_wheels.py --quantized-only). Each
variant is checked against eager first (tests/gpu/test_gpu_quantized.py's tolerance).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo.testing from this checkout

from aotcombo.testing.compare import relative_error  # noqa: E402
from aotcombo.testing.paths import sample_model  # noqa: E402
from aotcombo.testing.timing import time_synced_interleaved, warm_up  # noqa: E402

BATCHES = (1, 4, 16, 32)
PACKAGES = {"quantized_int8": "get_model", "quantized_int4": "get_int4_model"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="folder for quantized_bench.json")
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    sample, device, rows = sample_model("quantized_decode"), torch.device("cuda"), []
    for name, model_fn in PACKAGES.items():
        eager = getattr(sample, model_fn)().to(device)
        exact = copy.deepcopy(eager).double()
        ours = importlib.import_module(name).load("cuda")
        compiled = torch.compile(eager, mode="reduce-overhead", dynamic=False)
        for batch in BATCHES:
            sets = [tuple(t.to(device) for t in sample.get_example_inputs(batch, seed=s)) for s in range(4)]
            variants = {"aotcombo": ours, "torch.compile": compiled, "eager": eager}
            with torch.no_grad():
                tokens, k_past, v_past = sets[0]
                ref = exact(tokens, k_past.double(), v_past.double())
                tolerance = max(1e-2, 2 * relative_error(eager(*sets[0]), ref))
                for label, fn in variants.items():
                    warm_up(fn, sets, device, calls=20, seconds=1.0)
                    error = relative_error(fn(*sets[0]), ref)
                    assert error <= tolerance, (name, batch, label, error, tolerance)
                times = time_synced_interleaved(list(variants.values()), [sets] * len(variants), device, args.calls)
            row = {"package": name, "batch": batch, **{k: t["median"] for k, t in zip(variants, times)}}
            rows.append(row)
            print(f"{name} batch {batch:>2}: " + ", ".join(f"{k} {row[k]:.4f} ms" for k in variants)
                  + f"; torch.compile / aotcombo {row['torch.compile'] / row['aotcombo']:.2f}x", flush=True)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "quantized_bench.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
