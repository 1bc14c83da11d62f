"""The LLM sections of docs/performance.md (scripts/performance_doc.py writes the page): Llama 3 8B's
step, tensor parallel, a batch of sequences at their own positions, the sampling head."""

from __future__ import annotations

import json
from pathlib import Path

from performance_format import jsonl, ms, ratio, shown, table


# What each tensor-parallel run's packages were (their rules), by result file.
TP_BUILDS = {"tp_bench_h100.jsonl": "gate/up GEMV tiles 4 x 1024", "tp_bench_h100_glu.jsonl": "gate/up 2 x 2048",
             "tp_bench_h100_arsync.jsonl": "gate/up 2 x 2048, all-reduces on the current stream",
             "tp_bench_h100_cache.jsonl": "and each rank's cache written in place"}


def section_tensor_parallel(results: Path, sources: list[str]) -> list[str]:
    found = [(name, r) for name in sources if (results / name).is_file() for r in jsonl(results / name)]
    if not found:
        return []
    lines = table(["model", "build", "ranks", "ours, one GPU", "ours, TP", "torch TP + RO", "TP / one GPU",
                   "torch TP RO / ours TP", "TP: % of copy bandwidth per rank"],
                  [[r["model"], TP_BUILDS.get(Path(name).name, "?"), str(r["world"]), ms(r["ours_one_gpu_ms"]),
                    ms(r["ours_tp_ms"]), ms(r.get("torch_tp_ro_ms")), ratio(r["ours_tp_ms"], r["ours_one_gpu_ms"]),
                    ratio(r.get("torch_tp_ro_ms"), r["ours_tp_ms"]), f"{100 * r['ours_tp_copy_fraction']:.0f} %"]
                   for name, r in found])
    where = ", ".join(sorted({f"{r['device']} x {r['world']}, torch {r['torch']}" for _, r in found}))
    return ["## Tensor parallel", "",
            ("A decode step (batch 1, cache position 512) of `sample_models/full_size/` built with `--tensor-parallel "
             "2` against the one-GPU package (rank 0 alone) and the same model split by torch's `parallelize_module` "
             "with the same plan under `torch.compile(mode=\"reduce-overhead\")`, all under `torchrun` in one run "
             "per row (`benchmarks/tp_bench.py`); milliseconds per token, medians. Bytes per rank: the weights a "
             "rank holds but the embedding table, and the cache written so far."), "",
            *lines, "", "Source: " + ", ".join(f"`{shown(results / n)}`" for n in sources) + f" ({where}).", ""]


# Llama 3 8B's step reads every weight but the embedding table and its cache up to position 512 (tp_bench's
# one_gpu_bytes).
LLAMA_8B_DECODE_BYTES = 15.077e9


def span_ms(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows]
    return f"{min(values):.2f}-{max(values):.2f} ms" if values else "not measured"


def section_llama_8b(results: Path, sources: list[str], read_bandwidth: str) -> list[str]:
    rows = [r for name in sources if (results / name).is_file() for r in jsonl(results / name)]
    if not rows:
        return []
    lines = table(["date", "device", "build", "eager", "reduce-overhead", "ours, default", "ours, serving path",
                   "RO / default"],
                  [[r["date"], r["device"], r["build"], ms(r["eager_ms"]), ms(r["compile_ro_ms"]),
                    ms(r["ours_default_ms"]), ms(r["ours_static_ms"]), ratio(r["compile_ro_ms"], r["ours_default_ms"])]
                   for r in rows])
    h100 = [r for r in rows if "H100" in r["device"]]
    text = []
    path = results / read_bandwidth
    if path.is_file():
        read = json.loads(path.read_text())
        floor = LLAMA_8B_DECODE_BYTES / (read["best_read_GBps"] * 1e9) * 1e3
        text = [(f"The step reads {LLAMA_8B_DECODE_BYTES / 1e9:.2f} GB. The fastest read of memory measured on the "
                 f"{read['device']} (`benchmarks/read_bandwidth.py`: copy {read['copy_GBps']:.0f} GB/s read + write, "
                 f"`torch.sum` {read['torch_sum_GBps']:.0f}, cuBLAS's GEMV {read['cublas_gemv_GBps']:.0f}, a read-only "
                 f"Triton kernel {read['best_read_GBps']:.0f}) puts its floor at {floor:.2f} ms; "
                 f"`{shown(path)}`."), ""]
    return ["## Llama 3 8B decode", "",
            ("`sample_models/full_size/llama_8b_decode.py` (batch 1, a static cache of 1024 positions, `--weights "
             "external`): eager, `torch.compile(mode=\"reduce-overhead\")` and ours, one process per row "
             "(`benchmarks/zoo_bench.py full/llama_8b_decode`); milliseconds per token, medians. Reduce-overhead "
             f"varies more from run to run than ours (on the H100: reduce-overhead {span_ms(h100, 'compile_ro_ms')}, "
             f"ours {span_ms(h100, 'ours_default_ms')})."), "",
            *lines, "", *text, "Source: " + ", ".join(f"`{shown(results / n)}`" for n in sources) + ".", ""]


# What each row's package was: the builds of one run share a file.
BATCH_BUILDS = {
    ("llm_batch_bench_targets.jsonl", "full_llama_8b_batch"): "attention in 256 programs (the rule before), PDL",
    ("llm_batch_bench_targets.jsonl", "full_llama_8b_batch_t1024"): "attention in 1024 programs, PDL",
    ("llm_batch_bench_targets.jsonl", "full_llama_8b_batch_t1024n"): "attention in 1024 programs, --no-pdl",
    ("llm_batch_bench.jsonl", "full_llama_8b_batch"): "today's rules, PDL",
    ("llm_batch_bench.jsonl", "full_llama_8b_batch_r"): "PDL only for kernels of >= 528 or <= 66 programs",
    ("llm_batch_bench.jsonl", "full_llama_8b_batch_t1024n"): "today's rules, --no-pdl (the sample's build)",
}


def section_llm_batch(results: Path, sources: list[str]) -> list[str]:
    found = [(name, r) for name in sources if (results / name).is_file() for r in jsonl(results / name) if "ms" in r]
    if not found:
        return []
    lines = table(["run", "build", "ms per step", "% of copy bandwidth", "logits within tolerance"],
                  [[str(sources.index(name) + 1), BATCH_BUILDS.get((Path(name).name, r.get("package")),
                                                                   r.get("package", "?")),
                    ms(r["ms"]), f"{100 * r['copy_fraction']:.0f} %", "yes" if r.get("ok") else "no"]
                   for name, r in found])
    where = ", ".join(sorted({f"{r['device']}, torch {r['torch']}" for _, r in found}))
    return ["## Eight sequences at eight positions", "",
            ("Llama 3 8B's decode step for eight sequences, each at its own cache position (5 to 896; "
             "`sample_models/full_size/llama_8b_batch.py`, `--weights external`), checked against a float32 "
             "model and timed on the serving path (`benchmarks/llm_batch_bench.py`); medians of 200 steps, one "
             "run per number in the first column. Bytes: every weight but the embedding table, and each row's "
             "keys and values up to its position (15.5 GB)."), "",
            *lines, "", "Source: " + ", ".join(f"`{shown(results / n)}`" for n in sources) + f" ({where}).", ""]


def section_sampling(results: Path, sources: list[str]) -> list[str]:
    rows = [r for name in sources if (results / name).is_file() for r in jsonl(results / name) if "step_ms" in r]
    if not rows:
        return []
    lines = table(["step", "head", "step", "step then head", "ratio", "head at batch 1", "head at batch 16"],
                  [[r.get("model", "llama_1b_decode"), "before" if "before" in name else "now", ms(r["step_ms"]),
                    ms(r["step_then_head_ms"]), ratio(r["step_then_head_ms"], r["step_ms"]), ms(r["head_b1_ms"]),
                    ms(r["head_b16_ms"])]
                   for name in sources if (results / name).is_file() for r in jsonl(results / name)
                   if "step_ms" in r])
    where = ", ".join(sorted({f"{r['device']}, torch {r['torch']}" for r in rows}))
    return ["## Sampling in the package", "",
            ("A decode step alone against the step followed by `sample_models/sampling_head.py` (repetition "
             "penalty, temperature, top-k, top-p, Gumbel-max over 128256 logits) at batch 1, both graph mode "
             "(`benchmarks/sampling_bench.py`); milliseconds, medians of 300 calls in turn. *before*: the "
             "head's final argmax as one program per row; *now*: split in two stages at build time."), "",
            *lines, "", "Source: " + ", ".join(f"`{shown(results / n)}`" for n in sources) + f" ({where}).", ""]
