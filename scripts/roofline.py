#!/usr/bin/env python3
"""The roofline floor of one forward of each full-size model (``sample_models/full_size/``), no GPU needed.

    .venv/bin/python scripts/roofline.py [MODEL ...] [--out benchmarks/results/roofline]

Each model is made on the meta device (no weights materialised) and run once on its file's example
inputs under torch's ``FlopCounterMode`` (matmuls, convolutions, attention). Bytes: every weight read
once (a tied weight once; an embedding table only for the rows its lookups gather), the inputs read
and the outputs written once; the activations in between are taken to stay on chip, so the floor is
below anything a real forward reaches. Floor = max(bytes / copy bandwidth, FLOPs / dense matmul peak)
on the H100 (copy 3.0 TB/s, read + write, measured) and the H200 (4.24 TB/s); both 989 TFLOP/s in
16 bits (67 in float32); *bound*: the larger term on the H100. Writes ``roofline.jsonl`` (a line a model), which
``scripts/performance_doc.py`` reads.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo.testing from this checkout

import torch  # noqa: E402
from torch.utils import _pytree  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from aotcombo.testing.zoo import FULL_SIZE, FULL_SIZE_DIR, model_file  # noqa: E402

DEVICES = {"H100": 3.0e12, "H200": 4.24e12}  # measured device-to-device copy, bytes/s (read + write)
MATMUL_PEAK = {torch.bfloat16: 989e12, torch.float16: 989e12, torch.float32: 67e12}


def measure(name: str) -> dict:
    source = model_file(name, FULL_SIZE_DIR)
    try:  # made on the meta device: no weights (moved there afterwards, a tied weight would come untied)
        model, inputs = source.get_model(device="meta"), source.get_example_inputs()
        if any(p.device.type != "meta" for p in model.parameters()):
            raise RuntimeError("not made on the meta device")
        moved, flops, dtype = forward_cost(model, [t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs])
    except RuntimeError:  # a model that reads a value (transformers' mask checks call .item()): on the CPU
        moved, flops, dtype = forward_cost(source.get_model(device="cpu"), source.get_example_inputs())
    row = {"dtype": str(dtype).removeprefix("torch."), "moved_mb": moved / 1e6, "gflop": flops / 1e9}
    for device_name, copy in DEVICES.items():
        row[f"floor_us_{device_name}"] = floor_us(moved, flops, dtype, copy)
    row["bound"] = "compute" if flops / MATMUL_PEAK[dtype] > moved / DEVICES["H100"] else "memory"  # on the H100
    return row


def floor_us(moved: float, flops: float, dtype: torch.dtype, copy_bytes_per_s: float) -> float:
    return 1e6 * max(moved / copy_bytes_per_s, flops / MATMUL_PEAK[dtype])


def forward_cost(model, inputs) -> tuple[int, int, torch.dtype]:
    """(bytes moved, FLOPs, the weights' dtype) of one forward of ``model`` on ``inputs``, as above. On
    the CPU it runs in float32 (the bytes counted in the model's dtype)."""
    model = model.eval()
    dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
    on_cpu = next(model.parameters()).device.type == "cpu"
    if on_cpu:
        model = model.float()
        inputs = [t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    size = torch.tensor([], dtype=dtype).element_size()

    def nbytes(t) -> int:
        return t.numel() * (size if t.is_floating_point() else t.element_size())

    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    read_whole = {id(m.weight) for m in model.modules() if not isinstance(m, torch.nn.Embedding)
                  and isinstance(getattr(m, "weight", None), torch.Tensor)}  # a table tied to a linear: read whole
    gathered = []
    hooks = [m.register_forward_hook(lambda m, i, out: gathered.append(nbytes(out)))
             for m in model.modules() if isinstance(m, torch.nn.Embedding) and id(m.weight) not in read_whole]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        outputs = model(*inputs)
    for hook in hooks:
        hook.remove()
    weights = {id(p): nbytes(p) for p in model.parameters() if id(p) not in tables or id(p) in read_whole}
    io = sum(nbytes(t) for t in _pytree.tree_leaves((inputs, outputs)) if isinstance(t, torch.Tensor))
    return sum(weights.values()) + io + sum(gathered), counter.get_total_flops(), dtype


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=[m for m in FULL_SIZE if m != "llama_8b_batch"])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "roofline"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "roofline.jsonl", "w") as f:
        for name in args.models:
            row = {"model": name, **measure(name)}
            print(f"{name}: {row['moved_mb']:.1f} MB, {row['gflop']:.1f} GFLOP, {row['bound']}-bound; floor "
                  f"{row['floor_us_H100']:.1f} us (H100), {row['floor_us_H200']:.1f} us (H200)", flush=True)
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
