#!/usr/bin/env python3
"""Llama 3 8B decode for eight sequences at eight positions (sample_models/full_size/llama_8b_batch.py,
package ``full_llama_8b_batch``), one GPU: checked against eager, then timed against the copy
bandwidth (issue 28: >= 80 %).

Check: eager bf16 and a float32 model of the same weights, the caches of all three filled with the
same random values; ``--steps`` steps, every row a position further each step (rows at 5 to 894
first), graph mode: the logits within max(1e-2, 2 x eager's own error) of float32's in relative
L2 (tests/gpu/test_gpu_llm.py's rule). Time: the serving path (static inputs,
``copy_outputs=False``, graph mode), median ms per step over ``--calls``, the rows' positions
rotating through four sets. A step's bytes: every weight but the embedding table (eight rows of it
read), and each row's keys and values up to its position. Against a device-to-device copy's
bandwidth (read + write) measured in the same run.

    PYTHONPATH=<site with the wheel>:. python3 benchmarks/llm_batch_bench.py --out $OUT
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
from aotcombo.testing.llm import batch_models, check_batch_steps  # noqa: E402
from aotcombo.testing.timing import copy_bandwidth, time_synced, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402


def step_bytes(model, positions: list[int]) -> int:
    """Bytes one step reads: the weights but the embedding table (a row per sequence), the cache
    positions each row attends over."""
    shape, total = model.tok_embeddings.weight.shape, 0
    for name, p in model.named_parameters():
        total += p.numel() * p.element_size() if name != "tok_embeddings.weight" else \
            len(positions) * shape[1] * p.element_size()
    per_position = 0
    for layer in model.layers:  # keys and values: [batch, kv_heads, max_seq, head_dim]
        cache = layer.attention.k_cache
        per_position += 2 * cache.shape[1] * cache.shape[3] * cache.element_size()
    return total + per_position * sum(p + 1 for p in positions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--package", default="full_llama_8b_batch", help="the installed package's name")
    args = parser.parse_args()
    device = torch.device("cuda")
    source = model_file("llama_8b_batch", FULL_SIZE_DIR)
    row = {"model": "llama_8b_batch", "package": args.package, "device": torch.cuda.get_device_name(),
           "torch": torch.__version__}
    with torch.no_grad():
        eager, reference, loaded = batch_models(source, import_package(args.package), device)
        checks = check_batch_steps(source, eager, reference, loaded, args.steps, device)
        row["checks"], row["ok"] = checks, all(c["ok"] for c in checks)
        print(json.dumps({"checks": checks}), flush=True)
        del reference, loaded
        torch.cuda.empty_cache()
        serving = import_package(args.package).load(device, weights=eager.state_dict(), copy_outputs=False)
        positions = source.get_example_inputs()[1].view(-1).tolist()
        sets = [tuple(t.to(device) for t in source.get_example_inputs(seed=s, positions=[p + s for p in positions]))
                for s in range(4)]
        warm_up(serving, sets, device, 20, 1.0)
        row["ms"] = time_synced(serving, sets, device, args.calls)["median"]
        row["bytes"] = step_bytes(eager, [p + 2 for p in positions])  # the sets' middle
        row["copy_GBps"] = round(copy_bandwidth(device, 1 << 30, 25, 200)["GBps"])
        row["copy_fraction"] = round(row["bytes"] / (row["ms"] * 1e-3) / 1e9 / row["copy_GBps"], 3)
    print(json.dumps({k: v for k, v in row.items() if k != "checks"}), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "llm_batch_bench.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
