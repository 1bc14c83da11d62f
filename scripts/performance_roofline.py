"""The roofline section of docs/performance.md (scripts/performance_doc.py writes the page): each
full-size model's floor, from scripts/roofline.py."""

from __future__ import annotations

from pathlib import Path

from performance_format import device_of, jsonl, ms, ratio, shown, table


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


ONE_RUN_ORDER = ("bert_base", "gpt2", "llama_1b", "vit_base", "resnet50", "whisper_encoder", "sd_unet")


def section_one_run(results: Path, sources: list[str], roofline: str) -> list[str]:
    """Every full-size model at its example shape: its floor on the run's GPU beside eager,
    reduce-overhead, max-autotune and our two calls (``benchmarks/zoo_bench.py --max-autotune``)."""
    paths = [results / name for name in sources]
    if not all(p.is_file() for p in paths) or not (results / roofline).is_file():
        return []
    rows = {r["model"].removeprefix("full/"): r for p in paths for r in jsonl(p) if "model" in r}
    floors = {r["model"]: r for r in jsonl(results / roofline)}
    device = device_of(results, sources[0])
    gpu = "H200" if "H200" in device else "H100"
    body = []
    for model in (m for m in ONE_RUN_ORDER if m in rows):
        r, floor = rows[model], floors.get(model, {}).get(f"floor_us_{gpu}")
        floor_ms = floor / 1e3 if floor else None
        body.append([model, ms(floor_ms), ms(r.get("eager_ms")), ms(r.get("compile_ro_ms")),
                     ms(r.get("compile_ma_ms")), ms(r.get("ours_default_ms")), ms(r.get("ours_static_ms")),
                     ratio(r.get("compile_ro_ms"), r.get("ours_default_ms")),
                     ratio(r.get("compile_ma_ms"), r.get("ours_default_ms")),
                     ratio(r.get("ours_static_ms"), floor_ms)])
    missing = [m for m in ONE_RUN_ORDER if m not in rows]
    no_ma = [m for m in ONE_RUN_ORDER if m in rows and "compile_ma_ms" not in rows[m]]
    gaps = ((f" Not in these runs: {', '.join(missing)}." if missing else "")
            + (f" Without max-autotune: {', '.join(no_ma)}." if no_ma else ""))
    return ["## Full-size models in one run", "",
            ("Each full-size model at its file's example shape (`sample_models/full_size/`, built with "
             "`--weights external --arch sm_90`), each row from one process of `benchmarks/zoo_bench.py "
             "--max-autotune full/MODEL ...` (eager, then ours default and serving path call by call in turn, then "
             "reduce-overhead, then max-autotune, each after its warm-up); milliseconds, medians. *floor*: the "
             f"model's roofline floor on this GPU ({gpu}, \"Roofline floors\" below). *RO / default* and *MA / "
             "default*: torch.compile's time over our default call's; *serving / floor*: how far our serving path "
             "sits above the floor." + gaps), "",
            f"Source: {', '.join(f'`{shown(p)}`' for p in paths)}. Device: {device}.", "",
            *table(["model", "floor", "eager", "reduce-overhead", "max-autotune", "ours, default", "ours, serving path",
                    "RO / default", "MA / default", "serving / floor"], body), ""]


def section_library_share(results: Path, sources: list[str], text: str) -> list[str]:
    """Each full-size model's default call and reduce-overhead's, one graph replay each, split by who
    wrote the kernels (``benchmarks/kernel_profile.py --replay --compiled --out``): how much of ours is
    library time reduce-overhead spends too, and the ratio that leaves within reach. A later file's row
    replaces an earlier one's."""
    paths = [results / name for name in sources]
    if not all(p.is_file() for p in paths):
        return []
    rows = {r["model"].removeprefix("full/"): r for p in paths for r in jsonl(p) if "reduce_overhead" in r}
    body = []
    for model in (m for m in ONE_RUN_ORDER if m in rows):
        ours, theirs = rows[model], rows[model]["reduce_overhead"]
        own = ours.get("ours_us", 0.0) + ours.get("copies_us", 0.0)
        body.append([model, f"{theirs['span_us']:.0f}", f"{ours['span_us']:.0f}",
                     ratio(theirs["span_us"], ours["span_us"]), f"{ours.get('libraries_us', 0.0):.0f}",
                     f"{theirs.get('libraries_us', 0.0):.0f}", f"{own:.0f}", f"{ours['gaps_us']:.0f}",
                     ratio(theirs["span_us"], ours.get("libraries_us")),
                     f"{max(0.0, theirs['span_us'] / 1.5 - ours.get('libraries_us', 0.0)):.0f}"])
    return ["## What the library kernels leave", "",
            ("One graph replay of each full-size model's default call and of reduce-overhead's, after 10 ms of "
             "rest (the median of 9 by span; `benchmarks/kernel_profile.py full/MODEL --replay --compiled --out "
             "DIR`, one process a model, one H100), each kernel's time taken as its share of the span: what it "
             "ran past the kernels before it, so a kernel launched early and waiting on the GPU counts once. "
             "*libraries*: cuBLAS, cuDNN and torch's attention, on either side the same kernels at large for "
             "the same matmuls, convolutions and attention; *ours, own*: the package's kernels and its copies; "
             "*gaps*: no kernel running. *ceiling*: reduce-overhead's span over our library share, the ratio "
             "ours would reach if everything else took no time at all; *room at 1.5×*: what ours may spend "
             "outside the libraries for 1.5× reduce-overhead's span. Microseconds." + text), "",
            f"Source: {', '.join(f'`{shown(p)}`' for p in paths)}. Device: {device_of(results, sources[0])}.", "",
            *table(["model", "reduce-overhead", "ours", "RO / ours", "libraries, ours", "libraries, RO",
                    "ours, own", "gaps, ours", "ceiling", "room at 1.5×"], body), ""]
