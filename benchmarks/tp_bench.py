#!/usr/bin/env python3
"""A tensor-parallel decode step against one GPU and against torch's own tensor parallel, side by
side in one run, under ``torchrun --nproc-per-node N`` on one host:

- ours TP: the ``--tensor-parallel N`` package (graph mode, the default call), every rank;
- torch TP: the same model split by torch's ``parallelize_module`` with the same plan (DTensor
  layers; ``testing.parallel.torch_tensor_parallel``) under ``torch.compile(mode="reduce-overhead")``;
- ours, one GPU: the one-GPU package on rank 0 alone (the others wait), and the GPU's
  device-to-device copy bandwidth there.

Times: synchronized wall clock per step on rank 0 (a step's collectives keep the ranks in step),
medians over --steps after a warm-up; ours TP and torch TP call by call in turn. Every step is a
decode step at cache position ``POSITION``. Bytes per step and rank: the weights the rank holds
but the embedding table (one row of it read) and the cache positions written so far.

    PYTHONPATH=<site with the packages>:. torchrun --nproc-per-node 2 benchmarks/tp_bench.py \\
        --model llama_8b_decode --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from aotcombo.runtime.manifest import ITEMSIZE  # noqa: E402
from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.parallel import init_rank, torch_tensor_parallel  # noqa: E402
from aotcombo.testing.timing import copy_bandwidth, time_synced, time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

POSITION = 512


def step_bytes(manifest) -> int:
    """Bytes a decode step at ``POSITION`` reads on one rank (see the module's docstring)."""
    total = 0
    for w in manifest.weights.tensors:
        n = ITEMSIZE[w.dtype]
        for d in w.shape:
            n *= d
        if w.name in manifest.weights.state:  # a cache: [batch, heads, positions, dim]
            n = n * (POSITION + 1) // w.shape[2] if len(w.shape) == 4 else 0
        elif w.name.endswith("embed_tokens.weight"):
            n = n // w.shape[0]
        total += 0 if w.same_as else n
    return total


def _progress(rank: int, started: float, line: str) -> None:
    if rank == 0:
        print(f"[{time.perf_counter() - started:6.1f} s] {line}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama_8b_decode", help="a file of sample_models/full_size")
    parser.add_argument("--out", default=".")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--no-compile", action="store_true", help="leave torch's tensor parallel out")
    args = parser.parse_args()
    started = time.perf_counter()
    rank, world, device = init_rank()
    source = model_file(args.model, FULL_SIZE_DIR)
    tp_package, one_package = import_package(f"full_{args.model}_tp{world}"), import_package(f"full_{args.model}")
    eager = source.get_model(device=device)
    weights = eager.state_dict()
    row = {"model": args.model, "world": world, "device": torch.cuda.get_device_name(device),
           "torch": torch.__version__, "position": POSITION}
    sets = [tuple(t.to(device) for t in source.get_example_inputs(pos=POSITION, seed=s)) for s in range(4)]
    with torch.no_grad():
        ours = tp_package.load(device, weights=weights)
        one = one_package.load(device, weights=weights) if rank == 0 else None
        fns = [ours]
        warm_up(ours, sets, device, 20, 0.0)  # a fixed count: every rank makes the same collectives
        _progress(rank, started, "ours loaded and warm")
        if not args.no_compile:
            compiled = torch.compile(torch_tensor_parallel(eager, world, device), mode="reduce-overhead")

            def torch_tp(*inputs):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(*inputs)

            start = time.perf_counter()
            try:  # fails alike on every rank (one trace, one program)
                warm_up(torch_tp, sets, device, 20, 0.0)
                fns.append(torch_tp)
            except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                row["torch_tp_ro_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            row["compile_s"] = round(time.perf_counter() - start, 1)
            _progress(rank, started, f"torch's tensor parallel compiled in {row['compile_s']} s")
        times = time_synced_interleaved(fns, [sets] * len(fns), device, args.steps)
        row["ours_tp_ms"] = times[0]["median"]
        if len(times) > 1:
            row["torch_tp_ro_ms"] = times[1]["median"]
        _progress(rank, started, f"timed: {times[0]['median']:.3f} ms ours" +
                  (f", {times[1]['median']:.3f} ms torch's" if len(times) > 1 else ""))
        dist.barrier()
        if rank == 0:
            warm_up(one, sets, device, 20, 1.0)
            row["ours_one_gpu_ms"] = time_synced(one, sets, device, args.steps)["median"]
            copy = copy_bandwidth(device, 1 << 30, 25, 200)
            row["copy_GBps"] = round(copy["GBps"])
        dist.barrier()
    if rank == 0:
        row["tp_bytes_per_rank"] = step_bytes(tp_package.manifest)
        row["one_gpu_bytes"] = step_bytes(one_package.manifest)
        for key, nbytes in (("ours_tp_ms", row["tp_bytes_per_rank"]), ("ours_one_gpu_ms", row["one_gpu_bytes"])):
            row[key.replace("_ms", "_copy_fraction")] = round(nbytes / (row[key] * 1e-3) / 1e9 / row["copy_GBps"], 3)
        row["tp_over_one_gpu"] = round(row["ours_tp_ms"] / row["ours_one_gpu_ms"], 3)
        if "torch_tp_ro_ms" in row:
            row["torch_tp_ro_over_ours_tp"] = round(row["torch_tp_ro_ms"] / row["ours_tp_ms"], 3)
        print(json.dumps(row), flush=True)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / "tp_bench.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    # Observed on two H100s (torch 2.11): after its last line the process stayed alive until
    # torchrun's caller killed it, 70 s and (with the group destroyed first) 420 s later.
    # Nothing is left to do: leave at once, the group as it is.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
