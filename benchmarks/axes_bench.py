#!/usr/bin/env python3
"""Dynamic axes on one GPU, one run: BERT-base built once with ``--dynamic batch=1:32,seq=1:512``
against BERT-base built for exactly each shape, and against
``torch.compile(mode="reduce-overhead", dynamic=True)``, at 8 (batch, seq) shapes.

    PYTHONPATH=<site with the wheels>:. PYTHONUNBUFFERED=1 python3 benchmarks/axes_bench.py --out $OUT

Wheels: ``scripts/build_axes.py`` (``full_bert_base_dyn`` and ``full_bert_base_b<B>_s<S>``, all
``--weights external``: every side takes the weights of the file's model made here). Per
shape, on input sets drawn with fresh seeds (rows padded to lengths of their own):
- ``dynamic``: the dynamic package's default call (``load("cuda")``: a CUDA graph per size,
  captured at its second call; warmed up first);
- ``exact``: the package built for that shape, default call;
- ``op_by_op``: the dynamic package with ``graphs=False`` (what a size past the graph budget
  costs); the three timed call by call in turn (A B C A B C ...), synchronized wall clock, medians;
- ``compile_ro``: ``torch.compile(mode="reduce-overhead", dynamic=True)``, compiled once,
  warmed up at each shape (its per-shape recording kept out of the timing), measured after
  ours (its CUDA graph trees must not record while ours are live).
Writes ``$OUT/axes_bench.jsonl`` and prints a table of medians and ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.timing import time_synced, time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

SHAPES = ((1, 7), (1, 128), (2, 77), (4, 129), (8, 128), (8, 383), (16, 256), (32, 512))
SEEDS = (401, 402, 403, 404)


def input_sets(batch: int, seq: int) -> list[tuple]:
    sets = []
    for seed in SEEDS:
        g = torch.Generator().manual_seed(seed * 7919 + batch * 1000 + seq)
        ids = torch.randint(0, 30522, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        for b in range(1, batch):
            mask[b, int(torch.randint(1, seq + 1, (1,), generator=g)):] = 0
        sets.append((ids.cuda(), mask.cuda()))
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE.parent / "out"))
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    eager = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda")
    weights = eager.state_dict()
    package = import_package("full_bert_base_dyn")
    dynamic, op_by_op = package.load("cuda", weights=weights), package.load("cuda", graphs=False, weights=weights)
    rows = []
    with torch.no_grad():
        for batch, seq in SHAPES:
            sets = input_sets(batch, seq)
            exact = import_package(f"full_bert_base_b{batch}_s{seq}").load("cuda", weights=weights)
            for fn in (dynamic, exact, op_by_op):
                warm_up(fn, sets, device, calls=5, seconds=0.2)
            ours = time_synced_interleaved([dynamic, exact, op_by_op], [sets] * 3, device, args.calls)
            row = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "batch": batch, "seq": seq, "dynamic_ms": ours[0]["median"], "exact_ms": ours[1]["median"],
                   "op_by_op_ms": ours[2]["median"]}
            warm_up(eager, sets, device, calls=3, seconds=0.1)
            row["eager_ms"] = time_synced(eager, sets, device, args.calls)["median"]
            rows.append(row)
            del exact
        del dynamic, op_by_op
        torch.cuda.synchronize()
        if not args.no_compile:
            start = time.perf_counter()
            compiled = torch.compile(eager, mode="reduce-overhead", dynamic=True)

            def ro(*x):
                torch.compiler.cudagraph_mark_step_begin()
                return compiled(*x)

            for row in rows:
                sets = input_sets(row["batch"], row["seq"])
                first = time.perf_counter()
                for _ in range(3):
                    ro(*sets[0])
                torch.cuda.synchronize()
                row["compile_first_s"] = round(time.perf_counter() - first, 2)
                warm_up(ro, sets, device, calls=5, seconds=0.2)
                row["compile_ro_ms"] = time_synced(ro, sets, device, args.calls)["median"]
            print(f"torch.compile: {time.perf_counter() - start:.1f} s in all", flush=True)
    with open(out / "axes_bench.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(f"\n{'batch x seq':>12} {'eager':>8} {'RO dyn':>8} {'exact':>8} {'dynamic':>8} {'op/op':>8}  "
          "dynamic/exact  RO/dynamic  (ms, medians)")
    for r in rows:
        ro = r.get("compile_ro_ms")
        print(f"{r['batch']:>5} x {r['seq']:<4} {r['eager_ms']:8.3f} {ro or float('nan'):8.3f} {r['exact_ms']:8.3f} "
              f"{r['dynamic_ms']:8.3f} {r['op_by_op_ms']:8.3f}  {r['dynamic_ms'] / r['exact_ms']:13.2f}  "
              f"{(ro or float('nan')) / r['dynamic_ms']:10.2f}")


if __name__ == "__main__":
    main()
