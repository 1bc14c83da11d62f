#!/usr/bin/env python3
"""Builds of one full-size decode model side by side in one process: a change against its
baseline, each package a build of the same file under another name.

    PYTHONPATH=<site with the packages>:. PYTHONUNBUFFERED=1 python3 benchmarks/pair_bench.py \\
        llama_8b_decode base_llama_8b_decode full_llama_8b_decode --positions 5,1000 --out $OUT

The model is made from ``sample_models/full_size/MODEL.py`` with random weights on the GPU
(``get_model(device="cuda")``), and every package loads its ``state_dict()``
(``--weights external`` builds). First, each package's logits for one step from an empty
cache against eager's (relative L2). Then, per cache position, the serving path (static
inputs, ``copy_outputs=False``) of every package, call by call in turn (A B A B ...: a drift in
the machine's speed weighs on each alike), median ms per step over ``--calls``; a step's
bytes are the weights but the embedding table plus the cache positions it reads (up to its
own), over the step's time: its bandwidth, set against a device-to-device copy's (read +
write) measured in the same run. ``--profile``: then each package's GPU time per kernel for
one step, op by op (no CUDA graph, launches as the program makes them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.compare import relative_error  # noqa: E402
from kernel_profile import kernel_table  # noqa: E402
from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.timing import copy_bandwidth, time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402


def step_bytes(model: torch.nn.Module, position: int, max_cache: int) -> int:
    """The weights a step reads (all but the embedding table, of which it gathers a row) and
    the cache positions up to ``position``."""
    weights = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "embed_tokens" not in n)
    cache = sum(b.numel() // max_cache * (position + 1) * b.element_size() for n, b in model.named_buffers()
                if n.rsplit(".", 1)[-1].startswith(("key_cache", "value_cache")))
    return weights + cache


def profile(package, weights: dict, inputs: tuple, top: int = 14) -> list[str]:
    """The package's GPU time per kernel for one step, op by op: the largest ``top`` lines."""
    rows = kernel_table(package.load("cuda", weights=weights, graphs=False), inputs, calls=10)
    lines = [f"{sum(r[2] for r in rows):.1f} us of GPU kernels per step, {sum(r[1] for r in rows)} kernels"]
    return lines + [f"{us:8.1f} us {count:4d}x  {key[:90]}" for key, count, us in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a file of sample_models/full_size/ (without .py)")
    parser.add_argument("packages", nargs="+", help="import names of its builds, the baseline first")
    parser.add_argument("--positions", default="5,1000")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", default=str(HERE.parent / "out"))
    args = parser.parse_args()
    device = torch.device("cuda")
    source = model_file(args.model, FULL_SIZE_DIR)
    eager = source.get_model(device="cuda")
    weights = eager.state_dict()
    packages = {name: import_package(name) for name in args.packages}
    copy = copy_bandwidth(device, 1 << 30, 25, 200)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device copy {copy['GBps']:.0f} GB/s")
    report = {"model": args.model, "device": torch.cuda.get_device_name(), "copy": copy, "rows": []}
    with torch.no_grad():
        first = tuple(t.cuda() for t in source.get_example_inputs(pos=5, seed=11))
        reference = eager(*first)
        report["error"] = {name: relative_error(p.load("cuda", weights=weights)(*first), reference)
                           for name, p in packages.items()}
        print("relative L2 against eager, one step from an empty cache:", report["error"])
        torch.cuda.empty_cache()
        loaded = [p.load("cuda", weights=weights, copy_outputs=False) for p in packages.values()]
        for position in (int(p) for p in args.positions.split(",")):
            sets = []
            for model in loaded:
                static = model.static_inputs()
                for dst, src in zip(static, source.get_example_inputs(pos=position, seed=position)):
                    dst.copy_(src)
                warm_up(model, [static], device, calls=10, seconds=0.3)
                sets.append([static])
            stats = time_synced_interleaved(loaded, sets, device, args.calls)
            nbytes = step_bytes(eager, position, source.MAX_CACHE)
            row = {"position": position, "bytes": nbytes}
            for name, s in zip(packages, stats):
                row[name] = {"ms": s["median"], "copy_fraction": nbytes / (s["median"] * 1e-3) / copy["GBps"] / 1e9}
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
        del loaded
        torch.cuda.empty_cache()
        if args.profile:
            report["profile"] = {}
            for name, p in packages.items():
                report["profile"][name] = profile(p, weights, first)
                print(f"\n{name}, op by op: " + "\n".join(report["profile"][name]), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / f"pair_bench_{args.model}.json", "w") as f:
        json.dump(report, f, indent=1)
    print(f"\n{args.model}: ms per step (median of {args.calls}), % of copy bandwidth ({copy['GBps']:.0f} GB/s)")
    for row in report["rows"]:
        cells = "  ".join(f"{n} {row[n]['ms']:.3f} ms {100 * row[n]['copy_fraction']:.1f} %" for n in packages)
        print(f"  position {row['position']:5d}: {cells}")


if __name__ == "__main__":
    main()
