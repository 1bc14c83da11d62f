#!/usr/bin/env python3
"""Graph mode with dynamic axes under a stream of requests of many sizes: which sizes should hold
a CUDA graph (issue 26's policy), on one GPU, one run.

    PYTHONPATH=<site with the wheels>:. PYTHONUNBUFFERED=1 python3 benchmarks/graph_policy_bench.py --out $OUT

Two builds of BERT-base (sample_models/full_size/bert_base.py, ``--dynamic batch=1:32,seq=1:512
--weights external``) that differ only in their runtime: ``--old PACKAGE`` gives the first 64 sizes
it sees a graph (captured at their second call) and runs every later size op by op; ``--new PACKAGE`` keeps the 64
called most recently, dropping the least recent for a new capture (runtime/per_size.py), a size
captured at its k-th call for each k of ``--capture-after`` (the calls before a capture leave cuDNN's
attention out, ``ops.fresh_shapes``; ``recent_64_at_8_cudnn_first``: not). Also ``graphs=False`` (every call op
by op). First, every request once op by op (``first_sight``: what cuDNN and cuBLAS pay at a
shape's first sight in a process, kept out of the policies'), before that with cuDNN's attention
off (``_no_cudnn``: torch's memory-efficient kernel), and last op by op both ways, warm. Each serves the same requests,
one after the other, each call synchronized: a search service's mix, batch 1 (50 %), 2, 4, 8, 16 and lengths from a
log-normal (median ``--median`` tokens, 1..512), ``--calls`` of them; then (``drift``) the same
count with the median moved to ``--drift-median``, the traffic of another hour. Per policy and
phase: mean and p50/p99 ms per call (captures included: a size's capture is paid by its
second call), the captures, the sizes holding a graph, the peak GPU memory. JSON lines to
``$OUT/graph_policy_bench.jsonl``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

BATCHES, BATCH_WEIGHTS = (1, 2, 4, 8, 16), (50, 20, 15, 10, 5)


def requests(count: int, median: float, seed: int, vocab: int) -> list[tuple]:
    """``count`` (ids, mask) pairs on the GPU: batch by BATCH_WEIGHTS, length log-normal."""
    g = torch.Generator().manual_seed(seed)
    batches = torch.multinomial(torch.tensor(BATCH_WEIGHTS, dtype=torch.float), count, True, generator=g)
    lengths = (torch.randn(count, generator=g) * 0.8).exp() * median
    out = []
    for b, n in zip(batches.tolist(), lengths.clamp(1, 512).round().int().tolist()):
        ids = torch.randint(0, vocab, (BATCHES[b], n), generator=g)
        out.append((ids.cuda(), torch.ones_like(ids).cuda()))
    return out


def serve(model, stream: list) -> list[float]:
    """Milliseconds per call, each synchronized."""
    times = []
    with torch.no_grad():
        for inputs in stream:
            torch.cuda.synchronize()
            start = time.perf_counter()
            model(*inputs)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return times


def summary(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"mean_ms": round(sum(times) / len(times), 4), "p50_ms": round(ordered[len(times) // 2], 4),
            "p99_ms": round(ordered[int(len(times) * 0.99)], 4), "total_s": round(sum(times) / 1e3, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE.parent / "out"))
    parser.add_argument("--old", default="full_bert_base_dyn_old")
    parser.add_argument("--new", default="full_bert_base_dyn")
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--median", type=float, default=24)
    parser.add_argument("--drift-median", type=float, default=120)
    parser.add_argument("--capture-after", type=lambda t: [int(k) for k in t.split(",")], default=[2, 4, 8, 16],
                        help="the new runtime's call of a size that captures it, each a policy (default 2,4,8,16)")
    parser.add_argument("--cold", metavar="POLICY", help="run this policy alone, from a cold process")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    eager = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda")
    weights, vocab = eager.state_dict(), eager.model.config.vocab_size
    phases = {"steady": requests(args.calls, args.median, 1, vocab),
              "drift": requests(args.calls, args.drift_median, 2, vocab)}
    distinct = {p: len({tuple(i[0].shape) for i in s}) for p, s in phases.items()}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; distinct sizes {distinct}", flush=True)
    rows = []
    # By default, first: each size's first sight, op by op (what torch's libraries pay once per
    # shape and process: cuDNN's attention plans, cuBLAS's heuristics), kept out of the rest;
    # without cuDNN's attention first (the memory-efficient kernel builds no plan per shape), then
    # with it, cuBLAS warm by then: the difference is what cuDNN's plans cost at first sight.
    # --cold POLICY: that one policy alone, from a cold process (first sights included).
    policies = [("first_sight_no_cudnn", args.new, {"graphs": False}, None),
                ("first_sight", args.new, {"graphs": False}, None), ("first_64", args.old, {}, None)]
    policies += [(f"recent_64_at_{k}", args.new, {}, k) for k in args.capture_after]
    policies += [("recent_64_at_8_cudnn_first", args.new, {}, 8), ("op_by_op", args.new, {"graphs": False}, None),
                 ("op_by_op_no_cudnn", args.new, {"graphs": False}, None)]
    if args.cold:
        policies = [p for p in policies if p[0] == args.cold]
    for policy, package, options, capture_after in policies:
        torch.backends.cuda.enable_cudnn_sdp("no_cudnn" not in policy)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        runtime = importlib.import_module(f"{package}._runtime.ops")
        fresh_shapes = runtime.fresh_shapes if hasattr(runtime, "fresh_shapes") else None
        if policy.endswith("_cudnn_first"):  # cuDNN's attention at first sight too (the rule off)
            runtime.fresh_shapes = contextlib.nullcontext
        model = import_package(package).load("cuda", weights=weights, **options)
        if capture_after is not None:
            model.capture_after = capture_after
        for phase, stream in phases.items():
            row = {"policy": policy, "phase": phase, "calls": len(stream), "distinct_sizes": distinct[phase],
                   **summary(serve(model, stream)), "graphs_held": len(model.sizes()) if options == {} else 0,
                   "captures": getattr(model, "captures", None),
                   "peak_mib": round(torch.cuda.max_memory_allocated() / 2 ** 20)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        del model
        if fresh_shapes is not None:
            runtime.fresh_shapes = fresh_shapes
    with open(Path(args.out) / "graph_policy_bench.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"\n{'policy':27} {'phase':7} {'mean ms':>8} {'p50':>7} {'p99':>8} {'graphs':>6} {'peak MiB':>8}")
    for r in rows:
        print(f"{r['policy']:27} {r['phase']:7} {r['mean_ms']:8.3f} {r['p50_ms']:7.3f} {r['p99_ms']:8.3f} "
              f"{r['graphs_held']:6} {r['peak_mib']:8}")


if __name__ == "__main__":
    main()
