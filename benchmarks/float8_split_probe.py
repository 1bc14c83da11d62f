"""Float8 linears of few rows split along K: torch's grouped float8 matmul over K slices against one
``_scaled_mm``, on the GPU (sm_90).

    python3 benchmarks/float8_split_probe.py [--out rows.jsonl]

The question (issue 27's float8 prefill, 1.22x our bf16 package where 1.3x is asked): at a 512-token
Llama 3.2 1B prefill, cuBLAS's float8 kernels take 128 x 128 tiles, so the linears of 2048 outputs
have 64 tiles for 132 multiprocessors (the down projection walks its K of 8192 on half the chip).
``torch._scaled_grouped_mm`` on 3D operands (G slices of K: x viewed [G, M, K/G], W [G, K/G, N],
the row and column scales broadcast over G) gives G times the tiles in one launch; the slices'
bfloat16 partial products are then summed (the sum alone is timed too: in a model it joins the
residual add that follows). Each variant is checked against float64 on fresh random inputs
(relative L2 against the exact product of the dequantized operands <= 1e-2, output poisoned) and
timed as CUDA graphs of 10 calls over 4 input sets, medians of 50 replays
(``fused_linear_bench.time_graph``). bf16's ``F.linear`` of the same shape beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fused_linear_bench import time_graph  # noqa: E402

SHAPES = {  # name: (M, K, N): Llama 3.2 1B's linears at a 512-token prefill
    "qkv": (512, 2048, 3072), "o": (512, 2048, 2048), "gateup": (512, 2048, 16384), "down": (512, 8192, 2048),
    "head": (512, 2048, 128256),
}
SPLITS = (2, 4)
FP8 = torch.float8_e4m3fn


def operands(m: int, k: int, n: int, seed: int) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=gen)
    w = torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5
    sx = x.abs().amax(1) / 448.0  # per row, as torchao's PerRow
    sw = w.abs().amax(1) / 448.0  # per output channel
    return {"x": (x / sx[:, None]).to(FP8), "w": (w / sw[:, None]).to(FP8), "sx": sx, "sw": sw,
            "x16": x.bfloat16(), "w16": w.bfloat16()}


def scaled_mm(t: dict) -> torch.Tensor:
    return torch._scaled_mm(t["x"], t["w"].T, t["sx"][:, None], t["sw"][None, :], out_dtype=torch.bfloat16)


def split_parts(t: dict, g: int) -> torch.Tensor:
    """[g, M, N]: the products of the g slices of K, in one grouped launch."""
    m, k = t["x"].shape
    n = t["w"].shape[0]
    a = t["x"].view(m, g, k // g).transpose(0, 1)  # [g, M, K/g], row-major slices
    b = t["w"].view(n, g, k // g).permute(1, 2, 0)  # [g, K/g, N], column-major slices
    return torch._scaled_grouped_mm(a, b, t["sx"].expand(g, m), t["sw"].expand(g, n), out_dtype=torch.bfloat16)


def run(out: Path | None) -> None:
    rows = []
    for name, (m, k, n) in SHAPES.items():
        sets = [operands(m, k, n, seed) for seed in range(4)]
        check = operands(m, k, n, 100)
        exact = (check["x"].double() * check["sx"].double()[:, None]) @ (
            check["w"].double() * check["sw"].double()[:, None]).T
        row = {"name": name, "m": m, "k": k, "n": n, "device": torch.cuda.get_device_name()}
        row["bf16_linear_us"] = time_graph(lambda t: F.linear(t["x16"], t["w16"]), sets)
        variants = {"scaled_mm": scaled_mm}
        for g in SPLITS:
            variants[f"split{g}"] = lambda t, g=g: split_parts(t, g).sum(0)
            variants[f"split{g}_parts"] = lambda t, g=g: split_parts(t, g)
        for label, fn in variants.items():
            try:
                got = fn(check)
                if label.endswith("_parts"):
                    got = got.sum(0)
                error = ((got.double() - exact).norm() / exact.norm()).item()
                row[label + "_us"] = time_graph(fn, sets) if error <= 1e-2 else f"WRONG {error:.1e}"
            except Exception as exc:  # noqa: BLE001 - a variant this torch does not run
                row[label + "_us"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    labels = [key for key in rows[0] if key.endswith("_us")]
    print(f"\n{'linear':8}" + "".join(f"{key.removesuffix('_us'):>16}" for key in labels) + "   (us)")
    for r in rows:
        print(f"{r['name']:8}" + "".join(f"{r[key]:16.1f}" if isinstance(r[key], float) else f"{r[key][:15]:>16}"
                                         for key in labels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the rows as JSON lines here")
    run(parser.parse_args().out)


if __name__ == "__main__":
    main()
