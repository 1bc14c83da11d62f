"""Write docs/performance.md from the measurement results under benchmarks/results/.

    python scripts/performance_doc.py [--results benchmarks/results] [--out docs/performance.md]

Standard library only. The results folder is not tracked by git (it is ignored): it holds what
the GPU runs brought back (``benchmarks/*.py`` logs, JSON and JSON lines). ``SOURCES`` names, for
each section, the files of the newest run of its benchmark, relative to ``--results``; when a
newer run lands there, point its entry at the new files and run this again. Where a section lists
several files, a later file's row for a model replaces an earlier one's (a rerun after a fix). A
section whose files this checkout does not have keeps its text from the page as it stands (each
GPU run brings back its own results only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from performance_axes import section_axes
from performance_build import section_build_times
from performance_format import (ROOT, MissingResults, Page, call_table, device_of, jsonl, ms, ratio, shown,
                                sources_line, span, table)
from performance_llm import section_llama_8b, section_llm_batch, section_sampling, section_tensor_parallel
from performance_roofline import ONE_RUN_ORDER, section_library_share, section_one_run, section_roofline

SOURCES = {
    # benchmarks/zoo_bench.py: eager, reduce-overhead, our default call and serving path, one process per model
    "samples": ["call_path/c_guard_final/zoo_bench.jsonl"],
    "zoo": ["zoo/zoo_bench.jsonl"],
    "full_size": ["full_size/zoo_bench.jsonl", "full_size/zoo_bench_gpt2_padded.jsonl",
                  "full_size/zoo_bench_llama_1b_decode.jsonl", "full_size/zoo_bench_llama_1b_decode_glu.jsonl",
                  "full_size/zoo_bench_masks.jsonl", "full_size/zoo_bench_vit_patches.jsonl",
                  "full_size/zoo_bench_bert_key_mask.jsonl"],
    # the same, for the full-size models added later (one run per file)
    # zoo_bench.py --max-autotune: reduce-overhead and max-autotune beside ours, one run
    "max_autotune": [f"full_size/zoo_bench_{n}.jsonl" for n in ("max_autotune", "max_autotune_vit", "bert_key_mask")],
    "full_size_more": ["full_size/zoo_bench_whisper.jsonl", "full_size/zoo_bench_sd_unet.jsonl",
                       "full_size/zoo_bench_whisper_copies.jsonl", "full_size/zoo_bench_whisper_qkv.jsonl"],
    # benchmarks/llm_bench.py: a decode step of sample_models/llm_decode.py
    "llm": ["call_path/c_guard_final/llm_bench.json"],
    # benchmarks/first_output.py: time to first output in a fresh process
    "first_output": ["call_path/c_guard_final/first_output.jsonl"],
    # benchmarks/shapes_bench.py: bucketed against dynamic packages
    "shapes": ["call_path/c_guard_final/shapes_bench.log"],
    # benchmarks/axes_bench.py: BERT-base with dynamic batch and sequence length against exact builds
    "axes": ["axes_h100_s64/axes_bench.jsonl"],
    # benchmarks/tp_bench.py under torchrun: a tensor-parallel decode step against one GPU and torch's own TP
    "tensor_parallel": ["tp/tp_bench_h100.jsonl", "tp/tp_bench_h100_glu.jsonl", "tp/tp_bench_h100_arsync.jsonl",
                        "tp/tp_bench_h100_cache.jsonl"],
    # benchmarks/zoo_bench.py full/llama_8b_decode, one run a row; benchmarks/read_bandwidth.py
    "llama_8b": ["llama_8b/zoo_bench_runs.jsonl"],
    "read_bandwidth": ["read_bandwidth/read_bandwidth.json"],
    # benchmarks/llm_batch_bench.py: Llama 3 8B decode, eight sequences at eight positions
    "llm_batch": ["llm_batch/llm_batch_bench_targets.jsonl", "llm_batch/llm_batch_bench.jsonl"],
    # benchmarks/sampling_bench.py: a decode step with and without the sampling head
    "sampling": ["sampling/sampling_bench_before_split.jsonl", "sampling/sampling_bench.jsonl",
                 "sampling/sampling_bench_glu.jsonl"],
    # benchmarks/bench.py (fresh processes, torch.compile cold and warm) and bench_coldstart.py
    "cold_start": ["results.json", "cold_start.json"],
    # benchmarks/memory_bench.py: a call's memory and time, the build before buffers were released and after
    "memory": ["memory/mem_static.jsonl", "memory/mem_dyn.jsonl"],
    # scripts/build_times.py: the build command, static against two dynamic axes (no GPU)
    "build_times": ["build_times/build_times.jsonl"],
    # scripts/roofline.py: each full-size model's floor (no GPU)
    "roofline": ["roofline/roofline.jsonl"],
    # zoo_bench.py --max-autotune over the full-size set: each row one process (runs on one GPU kind appended)
    "one_run": ["full_size/one_run/zoo_bench.jsonl"],
    # zoo_bench.py (no max-autotune) over the full-size set on an H100: each row one process, one machine
    "one_run_h100": ["full_size_h100_s65/zoo_bench.jsonl"],
    # kernel_profile.py --replay --compiled --out over the full-size set on an H100: one process a model
    "library_share": ["full_size_h100_s66/kernel_profile_replay.jsonl"],
    # zoo_bench.py --no-compile, the package before a change and after, in turn in one session: (before, after)
    "before_after": [(["sd_unet_group_norm_s66/zb_a1/zoo_bench.jsonl", "sd_unet_group_norm_s66/zb_a2/zoo_bench.jsonl"],
                      ["sd_unet_group_norm_s66/zb_b1/zoo_bench.jsonl", "sd_unet_group_norm_s66/zb_b2/zoo_bench.jsonl"]),
                     (["whisper_query_scale_s66/wh_a/zoo_bench.jsonl"],
                      ["whisper_query_scale_s66/wh_b/zoo_bench.jsonl"])],
}
MEMORY_BEFORE_AFTER = ("_old", "")  # memory_bench.py's packages: the build before (name + "_old"), and after

SPAN = "Across the samples, the zoo and the full-size models"  # the head's line of ratios
SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")
# A Llama 3.2 1B decode step reads every weight once (the tied LM head once) and its 33.5 MB cache
# (benchmarks/results/full_size/README.md): about 2.50 GB per token.
LLAMA_1B_DECODE_BYTES = 2.50e9


# --- reading -----------------------------------------------------------------------------------


def _path(results: Path, name: str) -> Path:
    path = results / name
    if not path.is_file():
        raise MissingResults(f"{path}: not found (scripts/performance_doc.py SOURCES names it)")
    return path


def _rows(results: Path, names: list[str]) -> dict[str, dict]:
    """Rows by model, a later file's replacing an earlier one's."""
    rows: dict[str, dict] = {}
    for name in names:
        for row in jsonl(_path(results, name)):
            if "model" in row:
                rows[row["model"]] = row
    return rows


# --- sections ----------------------------------------------------------------------------------


def section_calls(results: Path, key: str, title: str, text: str, order=None) -> tuple[list[str], list[float]]:
    rows = _rows(results, SOURCES[key])
    order = order or list(rows)
    body, speedups = call_table(rows, [m for m in order if m in rows])
    lines = [f"## {title}", "", text, "", sources_line(results, SOURCES[key]), "", *body, ""]
    if speedups:
        lines += [(f"Against reduce-overhead the default call is {span(speedups)} as fast "
                   f"(the ratio is reduce-overhead's time over ours)."), ""]
    return lines, speedups


def section_llm(results: Path, full_size: dict[str, dict]) -> list[str]:
    data = json.loads(_path(results, SOURCES["llm"][0]).read_text())
    copy = data["copy"]["GBps"]
    rows = []
    for r in data["rows"]:
        rows.append([str(r["batch"]), f"{r['bytes'] / 1e6:.1f}", ms(r.get("eager_ms")), ms(r.get("compile_ro_ms")),
                     ms(r.get("ours_default_ms")), ms(r.get("ours_static_ms")),
                     ratio(r.get("compile_ro_ms"), r.get("ours_static_ms")),
                     f"{100 * r['bytes'] / (r['ours_static_ms'] * 1e-3) / (copy * 1e9):.0f} %"])
    lines = ["## LLM decode", "",
             ("A decode step of `sample_models/llm_decode.py` (4 layers, d 1024, bf16, a static KV cache of 2048 "
              "positions for 8 sequences), ms per token, median over the run's steps; *% of copy* is the bytes a step "
              "must read (every weight but the embedding table, and every cache position of its sequences) over "
              "the serving path's time, against the device-to-device copy bandwidth measured in the same run "
              f"({copy:.0f} GB/s)."), "",
             sources_line(results, SOURCES["llm"]), "",
             *table(["batch", "MB / step", "eager", "reduce-overhead", "ours, default", "ours, serving path",
                     "RO / serving", "% of copy"], rows), ""]
    decode = full_size.get("full/llama_1b_decode")
    if decode:
        fraction = LLAMA_1B_DECODE_BYTES / (decode["ours_static_ms"] * 1e-3) / (copy * 1e9)
        lines += [(f"At full size (a Llama 3.2 1B step over transformers' `StaticCache`, below) a token takes "
                   f"{decode['ours_static_ms']:.3f} ms on the serving path and reads about "
                   f"{LLAMA_1B_DECODE_BYTES / 1e9:.2f} GB: {100 * fraction:.0f} % of the copy bandwidth above "
                   "(measured in another run on the same kind of GPU). The small sample stays near 40 %: each of its "
                   "~33 dependent kernels ramps up and drains (about 2 µs apiece). Prefetching the next weights "
                   "into the L2 and running the step as one persistent kernel with grid barriers were both "
                   "measured and were not faster."), ""]
    return lines


def section_before_after(results: Path) -> list[str]:
    """Each change's package before and after it, in turn on one GPU (medians of the runs' medians)."""
    body, devices = [], set()
    for before, after in SOURCES["before_after"]:
        old, new = ([r for name in names for r in jsonl(_path(results, name)) if "ours_default_ms" in r]
                    for names in (before, after))
        old_ms, new_ms = (statistics.median(r["ours_default_ms"] for r in rows) for rows in (old, new))
        devices.add(device_of(results, before[0]))
        body.append([old[0]["model"], str(len(old)), ms(old_ms), ms(new_ms), f"{old_ms / new_ms:.3f}×"])
    return ["## Changes, before and after", "",
            ("The full-size package built before a change and after it, timed in turn on one GPU "
             "(`benchmarks/zoo_bench.py full/MODEL --no-compile`, each a process; the default call, ms, the "
             "median of the runs' medians). SD 1.5's UNet: GroupNorm's statistics a channel at a time "
             "(`builder/trace/group_norm.py`), every group taken (the build now leaves groups of fewer than "
             "8192 elements to Inductor: 17 launches fewer a call, not timed); Whisper-small: the query's "
             "factor of 1/8 in attention's scale (`builder/trace/attention_inputs.py`)."), "",
            f"Device: {'; '.join(sorted(devices))}.", "",
            *table(["model", "runs each", "before", "after", "before / after"], body), ""]


def section_first_output(results: Path) -> list[str]:
    rows = _rows(results, SOURCES["first_output"])
    out = [[m, f"{r['ours_s']:.2f}", f"{r['eager_s']:.2f}", ratio(r["eager_s"], r["ours_s"]), str(r["repeats"])]
           for m, r in rows.items()]
    return ["## Time to first output", "",
            ("Inside a fresh process, from just after `import torch` to the first synchronized output: the "
             "package's import, `load(\"cuda\")` and first call (op by op: the graph is captured at the second "
             "call) against eager's model import, `.cuda()` and first forward. Both include the CUDA context. "
             "Seconds, median over the processes."), "",
            sources_line(results, SOURCES["first_output"]), "",
            *table(["model", "ours (s)", "eager (s)", "eager / ours", "processes"], out), ""]


def section_cold_start(results: Path) -> list[str]:
    bench_name, coldstart_name = SOURCES["cold_start"]
    bench = json.loads(_path(results, bench_name).read_text())
    rows = []
    for model, data in bench["models"].items():
        cold = data.get("cold_start") or {}
        if cold:
            rows.append([model] + [f"{cold[k]['median_s']:.2f}" if cold.get(k, {}).get("median_s") else "–"
                                   for k in ("eager", "aotcombo", "torch.compile cold cache",
                                             "torch.compile warm cache")])
    lines = ["## Cold start", "",
             ("A new process from spawn to its first synchronized output, minus `import torch` alone (median "
              f"{bench['import_torch']['median_s']:.2f} s, measured the same way), seconds, median over the runs "
              "(`benchmarks/bench.py`); torch.compile's cold run starts from empty Inductor and Triton caches, its "
              f"warm runs reuse them. This run ({bench['meta'].get('date')}) is older than the sections above: "
              "then the default `load()` captured the graph at load."), "",
             sources_line(results, [bench_name]), "",
             *table(["model", "eager", "aotcombo", "torch.compile, cold cache", "torch.compile, warm cache"], rows), ""]
    detail = json.loads(_path(results, coldstart_name).read_text())
    graph = detail["modes"].get("graph", {}).get("detail_steps_s", {})
    if graph:
        parts = ", ".join(f"{k.replace('_', ' ')} {1000 * v:.0f} ms" for k, v in graph.items() if v >= 0.0005)
        lines += [(f"Where a package's load goes (`benchmarks/bench_coldstart.py`, {detail['name']}, graph captured "
                   f"at load; {device_of(results, coldstart_name)}; `{shown(results / coldstart_name)}`): {parts}; "
                   f"the largest part: {max(graph, key=graph.get).replace('_', ' ')}."), ""]
    return lines


def section_shapes(results: Path) -> list[str]:
    text = _path(results, SOURCES["shapes"][0]).read_text()
    ratios, models = [], set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[1].isdigit():
            models.add(cells[0])
            ratios.append(float(cells[9]))
    if not ratios:
        return []
    return ["## Batch sizes", "",
            (f"Dynamic batch (`--dynamic batch=1:256`) against buckets (`--batch 1,2,4,8,16,32 --pad`), serving "
             f"path, at batch 1, 8 and 32 for the {len(models)} samples: the dynamic package takes "
             f"{min(ratios):.2f}–{max(ratios):.2f} times the bucketed one's time (median "
             f"{statistics.median(ratios):.2f}; `benchmarks/shapes_bench.py`)."), "",
            sources_line(results, SOURCES["shapes"]), ""]


def section_memory(results: Path) -> list[str]:
    rows = [r for name in SOURCES["memory"] for r in jsonl(_path(results, name))]
    body = []
    for r in rows:
        package = next(k[:-len("_ms")] for k in r if k.endswith("_ms") and not k.endswith("_old_ms"))
        before, after = (f"{package}{suffix}" for suffix in MEMORY_BEFORE_AFTER)
        body.append([f"{package.removeprefix('full_bert_base').strip('_') or 'static'} at {r['batch']} × {r['seq']}",
                     f"{r[f'{before}_op_by_op_mb']:.1f}", f"{r[f'{after}_op_by_op_mb']:.1f}",
                     f"{r[f'{before}_graph_pool_mb']:.1f}", f"{r[f'{after}_graph_pool_mb']:.1f}",
                     ms(r[f"{before}_ms"]), ms(r[f"{after}_ms"])])
    return ["## Memory per call", "",
            ("Full-size BERT-base (fp16; static at 8 × 128, and `--dynamic batch=1:32,seq=1:512`), built before and "
             "after the program released each buffer after its last use (`plan/memory.py`; before, every buffer "
             "was allocated at the start and held to the end): one op-by-op call's peak above what was allocated "
             "before it, the pool a captured graph keeps, MB, and the default call's median, ms; both builds in "
             "one process (`benchmarks/memory_bench.py`). `aotcombo inspect` gives the peak the build computes "
             "(167.8 MB for the dynamic package at 32 × 512)."), "",
            *table(["package", "op by op, before", "after", "graph pool, before", "after", "ms, before", "after"],
                   body), "", sources_line(results, SOURCES["memory"]), ""]


def full_size(results: Path, full_rows: dict) -> tuple[list[str], list[float]]:
    gpt2 = full_rows.get("full/gpt2", {})
    return section_calls(results, "full_size", "Full-size models",
                         "`sample_models/full_size/`, built with `--weights external`: BERT-base (8 × 128 "
                         "tokens, fp16), GPT-2 small with its LM head (4 × 256, bf16), Llama 3.2 1B prefill "
                         "(128 tokens, bf16) and decode step over a static cache, ViT-B/16 and ResNet-50 (8 "
                         "images at 224², fp16); milliseconds per call. The rows of GPT-2 and the "
                         "1B prefill are their rerun after attention masks became additive once per forward "
                         "(reduce-overhead varies from run to run: GPT-2's took 1.436 ms in the run before); "
                         "ViT-B/16's after its patch embedding became a matmul and its attention ours (1.144 ms "
                         "before); BERT-base's after its padding mask went to our prefill attention (0.702 ms before; "
                         "reduce-overhead 1.305 ms in that run, 1.024 in this one, on another machine). "
                         "Where a model's output is large, the default call's copy shows: GPT-2's 103 MB of logits "
                         f"make it {ratio(gpt2.get('ours_default_ms'), gpt2.get('ours_static_ms'))} the serving path "
                         "(`copy_outputs=False` avoids the copy).",
                         order=[m for m in ("full/bert_base", "full/gpt2", "full/llama_1b", "full/llama_1b_decode",
                                            "full/vit_base", "full/resnet50") if m in full_rows])



# --- the document ------------------------------------------------------------------------------


def document(results: Path, page: Page) -> str:
    if not results.is_dir():
        raise MissingResults(f"{results}: no such folder: the GPU runs' results go there "
                             "(benchmarks/README.md says how to make them)")
    samples_text = ("The four sample models (`sample_models/`) and five zoo models, all in one run; milliseconds "
                    "per call.")
    samples, s1 = page.section("Samples", lambda: section_calls(
        results, "samples", "Samples", samples_text,
        order=list(SAMPLES) + ["vit_tiny", "gpt2_block", "dlrm", "llama_block", "gpt2"]))
    zoo, s2 = page.section("The zoo", lambda: section_calls(
        results, "zoo", "The zoo",
        "Real models at small configurations (`sample_models/zoo/`; launches, accuracy and "
        "roofline floors: [zoo.md](zoo.md)); milliseconds per call. Each model's variants ran "
        "in one process; the rows come from the zoo's runs on one kind of GPU.",
        order=sorted(_rows(results, SOURCES["zoo"]))))
    try:
        full_rows = _rows(results, SOURCES["full_size"])
        full, s3 = full_size(results, full_rows)
    except MissingResults:
        full_rows, (full, s3) = {}, page.section("Full-size models", _missing)
    more, _ = page.section("More full-size models", lambda: section_calls(
        results, "full_size_more", "More full-size models",
        "`sample_models/full_size/`, built with `--weights external`: the Whisper-small encoder (2 clips of 30 s, "
        "fp16) and Stable Diffusion 1.5's UNet (2 latents of 64 × 64, 77 text states each, fp16); milliseconds "
        "per call, one run per model. Whisper's row is its rerun after its attention stopped copying q, k, v and "
        "its output (`trace/attention_inputs.py`: 140 launches, 90 kernels, before; 128 and 54 after; ours "
        "2.229 ms in the run before, reduce-overhead 2.759 there: runs vary, eager 8.797 then), then after its "
        "q, k and v became one matmul (116 launches; ours 2.158 ms before)."))
    full += more
    span_line = (f"{SPAN}, the default call is {span(s1 + s2 + s3)} as fast as reduce-overhead."
                 if s1 and s2 and s3 else page.line(SPAN))
    head = [
        "# Performance",
        "",
        "*Written by `scripts/performance_doc.py` from `benchmarks/results/`: do not edit; rerun the script.*",
        "",
        "## Method",
        "",
        ("- **Wall clock per call**, synchronized before and after, **median** over the calls of a run (200 by "
         "default in `benchmarks/zoo_bench.py`) after a warm-up, input sets rotating."),
        ("- **One run side by side**: every variant of a model is timed in one process on one GPU, and every "
         "ratio compares numbers of one run. `zoo_bench.py` now times our default call and serving path call "
         "by call in turn (whole runs of calls on the GPU machine ran 1.5–3× slower now and then, for either "
         "path); most of the zoo's rows are from earlier runs, which timed them one after the other."),
        ("- **Variants**: eager under `torch.no_grad()`; `torch.compile(mode=\"reduce-overhead\")` (RO: Inductor "
         "with CUDA graphs), compile time excluded; ours, the *default* call `y = m(x)` (graph mode, fresh inputs, "
         "outputs the caller may keep) and the *serving path* `m(*m.static_inputs())` with `copy_outputs=False`."),
        "- **Ratios**: *RO / default* is reduce-overhead's time over ours: above 1, ours is faster.",
        ("- **Correctness** is checked apart: the GPU tests (`tests/gpu/`) compare the same packages "
         "with eager; `bench.py` and `shapes_bench.py` also check each variant before timing it. Packages "
         "were built on the GPU-less build machine (torch 2.14) and run under the torch named with each source."),
        "",
        span_line,
        "",
    ]
    sections = [
        ("LLM decode", lambda: section_llm(results, full_rows or _rows(results, SOURCES["full_size"]))),
        ("Time to first output", lambda: section_first_output(results)),
        ("Cold start", lambda: section_cold_start(results)),
        ("Batch sizes", lambda: section_shapes(results)),
        ("Against max-autotune", lambda: section_calls(results, "max_autotune", "Against max-autotune", (
            "Full-size BERT-base (8 × 128, fp16) and ViT-B/16 (8 images, fp16) with `torch.compile(mode="
            "\"max-autotune\")` (Inductor's autotuned GEMM templates and CUDA graphs; its compile 1-2 minutes "
            "a model) beside reduce-overhead and ours, one run a model (`benchmarks/zoo_bench.py --max-autotune`); "
            "ViT-B/16's is its rerun after its patch embedding became a matmul and its attention ours (ours 1.116 "
            "ms before), BERT-base's after its padding mask went to our prefill attention (ours 0.700 ms before). "
            "*MA / default*: max-autotune's time over our default call's."))[0]),
        ("Full-size models in one run", lambda: section_one_run(results, SOURCES["one_run"], SOURCES["roofline"][0])),
        ("Full-size models on an H100", lambda: section_calls(results, "one_run_h100", "Full-size models on an H100", (
            "The seven full-size models at their files' example shapes (built with `--weights external --arch "
            "sm_90`), each from its own process of `benchmarks/zoo_bench.py full/MODEL`, one after the other on one "
            "H100 in one session (2026-12-06); reduce-overhead only (max-autotune: the two tables above). "
            "Reduce-overhead's time moves from run to run on these machines: ViT-B/16's was 1.392 ms in the "
            "max-autotune table above and 1.210 here, ours 0.908 and 0.872."),
            order=[f"full/{m}" for m in ONE_RUN_ORDER])[0]),
        ("What the library kernels leave", lambda: section_library_share(results, SOURCES["library_share"], (
            " Packages built before GroupNorm's statistics and the query's scale changed "
            "(`builder/trace/group_norm.py`, `attention_inputs.py`): the UNet's and Whisper's own kernels take "
            "less time since (the next table)."))),
        ("Changes, before and after", lambda: section_before_after(results)),
        ("Roofline floors", lambda: section_roofline(results, SOURCES["roofline"][0])),
        ("Dynamic axes", lambda: section_axes(results, SOURCES["axes"])),
        ("Build time", lambda: section_build_times(results, SOURCES["build_times"])),
        ("Memory per call", lambda: section_memory(results)),
        ("Llama 3 8B decode", lambda: section_llama_8b(results, SOURCES["llama_8b"], SOURCES["read_bandwidth"][0])),
        ("Tensor parallel", lambda: section_tensor_parallel(results, SOURCES["tensor_parallel"])),
        ("Eight sequences at eight positions", lambda: section_llm_batch(results, SOURCES["llm_batch"])),
        ("Sampling in the package", lambda: section_sampling(results, SOURCES["sampling"])),
    ]
    body = samples + zoo + full + [line for title, make in sections for line in page.section(title, make)]
    return "\n".join(head + body).rstrip() + "\n"


def _missing():
    raise MissingResults("not in this checkout's results")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results"),
                        help="the results folder (default: %(default)s)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "performance.md"), help="the page (default: %(default)s)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        text = document(Path(args.results).resolve(), Page(out.read_text() if out.is_file() else ""))
    except MissingResults as exc:
        print(f"performance_doc: {exc}", file=sys.stderr)
        return 2
    out.write_text(text)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
