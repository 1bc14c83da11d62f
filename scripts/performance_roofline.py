"""The roofline section of docs/performance.md (scripts/performance_doc.py writes the page): each
full-size model's floor, from scripts/roofline.py."""

from __future__ import annotations

from pathlib import Path

from performance_format import jsonl, shown, table


def section_roofline(results: Path, source: str) -> list[str]:
    path = results / source
    if not path.is_file():
        return []
    body = [[r["model"], r["dtype"], f"{r['moved_mb']:.0f}", f"{r['gflop']:.1f}", r["bound"],
             f"{r['floor_us_H100'] / 1e3:.3f}", f"{r['floor_us_H200'] / 1e3:.3f}"] for r in jsonl(path)]
    return ["## Roofline floors", "",
            ("The floor of one forward of each full-size model at its file's example shape, to set the tables "
             "above against: every weight read once (a tied one once, an embedding table only for the rows "
             "gathered), the inputs read and the outputs written once, the activations in between kept on chip; "
             "FLOPs as torch's `FlopCounterMode` counts them (matmuls, convolutions, attention). Floor = "
             "max(bytes / copy bandwidth, FLOPs / 989 TFLOP/s, the dense 16-bit matmul peak), the copy measured at "
             "3.0 TB/s on the H100 and 4.24 on the H200 (`scripts/roofline.py`, no GPU needed); milliseconds; "
             "*bound*: the larger term on the H100. The compute-bound floors take the tensor cores' peak: "
             "cuBLAS's matmuls of BERT-base at 32 × 512 ran at 68 % of it on the H200 (2.78 TFLOP in 4.15 ms, "
             "torch's profiler)."), "",
            *table(["model", "dtype", "MB", "GFLOP", "bound", "floor H100", "floor H200"], body), "",
            f"Source: `{shown(path)}`.", ""]
