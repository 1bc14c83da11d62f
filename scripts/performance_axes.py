"""The dynamic-axes section of docs/performance.md (scripts/performance_doc.py writes the page): BERT-base
built once with two dynamic axes against builds for each exact shape, eager and reduce-overhead with
``dynamic=True``, from benchmarks/axes_bench.py, and where the largest shape's time goes."""

from __future__ import annotations

from pathlib import Path

from performance_format import MissingResults, jsonl, ms, ratio, sources_line, table


def section_axes(results: Path, sources: list[str]) -> list[str]:
    path = results / sources[0]
    if not path.is_file():
        raise MissingResults(f"{path}: not found (scripts/performance_doc.py SOURCES names it)")
    rows = jsonl(path)
    lines = table(["batch × seq", "eager", "RO dynamic=True", "exact shape", "dynamic", "op by op",
                   "dynamic / exact", "RO / dynamic"],
                  [[f"{r['batch']} × {r['seq']}", ms(r["eager_ms"]), ms(r.get("compile_ro_ms")), ms(r["exact_ms"]),
                    ms(r["dynamic_ms"]), ms(r["op_by_op_ms"]), ratio(r["dynamic_ms"], r["exact_ms"]),
                    ratio(r.get("compile_ro_ms"), r["dynamic_ms"])] for r in rows])
    top = max(rows, key=lambda r: r["batch"] * r["seq"])
    largest = "" if not top.get("compile_ro_ms") else (
        f": at {top['batch']} × {top['seq']}, {top['compile_ro_ms']:.3f} / {top['dynamic_ms']:.3f} = "
        f"{top['compile_ro_ms'] / top['dynamic_ms']:.3f}×")
    return ["## Dynamic axes", "",
            ("BERT-base (fp16) built once with `--dynamic batch=1:32,seq=1:512` against BERT-base built for exactly "
             "each shape, the dynamic package's op-by-op call (a size past its 64 graphs), eager and "
             "`torch.compile(mode=\"reduce-overhead\", dynamic=True)`; default calls, milliseconds, one run "
             "(`benchmarks/axes_bench.py`). At 1 × 7 both run our fused linears and small attention: the dynamic "
             "package's program for calls of at most 8 tokens reads their sizes at run time (`SizeClasses`); other "
             "sizes run cuBLAS and our prefill attention, which reads the padding mask a key at a time and skips the "
             "padded key blocks (`trace/mask_rows.py`, `kernels/attention/prefill.py`). At 32 × 512 both sides "
             "spend most of the call in the same cuBLAS GEMMs. One call of this package as a CUDA graph replay, the "
             "GPU rested 10 ms before it (torch's profiler, H100, 2026-12-06, us): GEMMs 3972, attention 796 (66 a "
             "layer), the GELU after FFN-up 794 (66 a layer: a copy of the same 201 MB took 70), the residual adds "
             "and layer norms 538, the embeddings 32 (one padded mask copy shared by all layers; 43 with a copy a "
             "layer), 6135 of kernels. Calls back to back take 6.9-7.0 ms: the GPU then runs at its 700 W power cap "
             "(690 W, clocks 1500-1695 MHz against 1980 at rest, nvidia-smi's reason: the software power cap); the "
             "host's part overlaps the GPU's (`benchmarks/sustained_clocks.py`; at 8 × 128, 540 W and 1980 MHz). "
             "The large GEMMs run through cuBLASLt with no workspace (`runtime/cublaslt.py`): the same tiles as "
             "torch's, scheduled statically, with no memset node before each, 7.294 -> 7.062 ms at 32 × 512 in an "
             "A/B run; where cuBLASLt offers 128 × 128 tiles in clusters of 1 × 2 they are taken "
             "(`cublaslt.PREFERRED`), 7.19 -> 7.07 ms, and from 4096 rows where it does not, 256 × 128 tiles in "
             "clusters of 1 × 2, 7.06 -> 7.00 ms, each in an A/B run (`benchmarks/cublaslt_ab.py --compare rule`, "
             "`--compare second`). Tried, not kept: the residual add in cuBLASLt's epilogue "
             "(`benchmarks/residual_epilogue_probe.py`), the attention's key ranges found once a call or its batches "
             "longest first, torch's flash attention over each batch's visible keys "
             "(`benchmarks/masked_prefill_probe.py`), 64-key steps in the attention (77.5 us a layer against 67.2). "
             "The attention reads a padding mask in its first pass only and takes 64 query rows a program (32 × 512: "
             "66.5-67.9 us a layer against 69.2-72.2; `benchmarks/attention_cubin_probe.py` times cubins compiled "
             "by the build's Triton, as packages run). reduce-overhead's time moves from run to run and machine to "
             "machine, with eager's: at 32 × 512 it took 8.796-9.343 ms in eight runs on H100s (9.261 and 9.534 on "
             "two whose eager calls took up to 1.8 times as long), ours 6.87-6.92 in the last three. The run below "
             "is of the code as it stands, on an H100 whose eager calls were not slow (2026-12-06)" + largest + "; a "
             "second run of the same wheels that day, on an H100 whose eager calls were slower (up to 8.0 ms), 9.447 / "
             "6.885 = 1.37× (`benchmarks/results/axes_h100_s64_second/`)."), "",
            *lines, "", sources_line(results, sources), ""]
