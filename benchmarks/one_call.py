"""One call of a built package, for compute-sanitizer: load, call once, synchronize, check.

    compute-sanitizer --tool memcheck python3 benchmarks/one_call.py branches [--mode op_by_op|graph|both]

The package must be importable (PYTHONPATH). For a precise memcheck of the op-by-op mode,
add PYTORCH_NO_CUDA_MEMORY_CACHING=1 (every buffer its own cudaMalloc, so an access past
one is caught); graph mode needs torch's caching allocator (its private pool), so run it
without. Exits 0 when the outputs are finite and close to the eager model's.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

import torch
from torch.utils import _pytree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo.testing from this checkout (PYTHONPATH names only the wheels' site)

from aotcombo.testing.compare import TOLERANCE, relative_error  # noqa: E402


def _sample(name: str):
    spec = importlib.util.spec_from_file_location(f"sample_{name}", ROOT / "sample_models" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_call(name: str, graphs: bool) -> float:
    """0.0 when every output of one call is finite and within tolerance of eager, else the worst
    relative L2 error (inf: a structure mismatch or a non-finite output)."""
    # <sample>_buckets, <sample>_dynamic: the sample's model at its default (example) batch size
    stem = name.rsplit("_", 1)[0] if name.endswith(("_buckets", "_dynamic", "_b1")) else name
    package, sample = importlib.import_module(name), _sample(stem)
    model = package.load("cuda", graphs=graphs)
    inputs = [t.cuda() for t in sample.get_example_inputs()]
    out = model(*inputs)
    torch.cuda.synchronize()
    with torch.no_grad():
        ref = sample.get_model().eval().cuda()(*inputs)
    got, want = _pytree.tree_leaves(out), _pytree.tree_leaves(ref)
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for g, r in zip(got, want):
        error = relative_error(g, r) if r.is_floating_point() else float(not torch.equal(g, r))
        if not torch.isfinite(g).all() or error > TOLERANCE.get(r.dtype, 0.0):
            print(f"  {g.dtype}{list(g.shape)}: relative L2 error {error:.2e}")
            worst = max(worst, float("inf") if not torch.isfinite(g).all() else error)
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name")
    parser.add_argument("--mode", choices=["op_by_op", "graph", "both"], default="both")
    a = parser.parse_args(argv)
    modes = ["op_by_op", "graph"] if a.mode == "both" else [a.mode]
    status = 0
    for mode in modes:
        worst = one_call(a.name, mode == "graph")
        ok = worst == 0.0
        print(f"{a.name} {mode}: {'ok' if ok else f'WRONG (worst error {worst:.2e})'}")
        status |= not ok
    return status


if __name__ == "__main__":
    sys.exit(main())
