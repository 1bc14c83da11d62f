#!/usr/bin/env python3
"""What sampling in the package costs a decode step (issue 28): a Llama decode step (``--model``:
the 3.2 1B or the 3 8B file of sample_models/full_size/) alone against the step followed by the
sampling head (sample_models/sampling_head.py: repetition
penalty, temperature, top-k, top-p, Gumbel-max over 128256 logits), one GPU, one run.

- step: ``full_<model>`` (``--weights external``), graph mode, static inputs,
  ``copy_outputs=False`` (the serving path);
- step + head: the same, its last logits (as float32) handed to ``sampling_head`` (graph mode,
  its bucket of batch 1), the token id returned;
- head: ``sampling_head`` alone at batch 1 and 16.

Medians of synchronized wall clock per call over ``--calls``, the variants call by call in turn.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/sampling_bench.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.paths import sample_model  # noqa: E402
from aotcombo.testing.timing import time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".")
    parser.add_argument("--model", default="llama_1b_decode", help="llama_1b_decode or llama_8b_decode")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--position", type=int, default=512)
    args = parser.parse_args()
    device = torch.device("cuda")
    source, head_source = model_file(args.model, FULL_SIZE_DIR), sample_model("sampling_head")
    row = {"model": args.model, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "position": args.position}
    with torch.no_grad():
        eager = source.get_model(device=device)
        step = import_package(f"full_{args.model}").load(device, weights=eager.state_dict(), copy_outputs=False)
        del eager
        head = import_package("sampling_head").load(device)
        sets = [tuple(t.to(device) for t in source.get_example_inputs(pos=args.position, seed=s)) for s in range(4)]
        heads = {b: [tuple(t.to(device) for t in head_source.get_example_inputs(b, seed=s)) for s in range(4)]
                 for b in (1, 16)}
        noise, previous = heads[1][0][1], heads[1][0][2]

        def step_then_head(*inputs):
            logits = step(*inputs)
            logits = logits[0] if isinstance(logits, (tuple, list)) else getattr(logits, "logits", logits)
            return head(logits[:, -1].float(), noise, previous)

        fns = {"step": (step, sets), "step_then_head": (step_then_head, sets),
               "head_b1": (head, heads[1]), "head_b16": (head, heads[16])}
        for fn, fn_sets in fns.values():
            warm_up(fn, fn_sets, device, 20, 1.0)
        times = time_synced_interleaved([f for f, _ in fns.values()], [s for _, s in fns.values()], device,
                                        args.calls)
    for name, t in zip(fns, times):
        row[f"{name}_ms"] = round(t["median"], 4)
    row["step_then_head_over_step"] = round(row["step_then_head_ms"] / row["step_ms"], 3)
    print(json.dumps(row), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "sampling_bench.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
