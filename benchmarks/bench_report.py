"""The benchmark's outputs from its results dict: markdown report, JSON file, PNG charts.

Pure Python (plus matplotlib for the charts, bench_charts.py, imported only when drawing), so the
report can be re-rendered anywhere from a results.json: ``bench.py --from-json``.
"""

from __future__ import annotations

import json
import math
import os

from bench_charts import cold_start_chart, latency_chart
from bench_goals import (CUDAGRAPH_VARIANTS, GOALS, LABELS, SHORT, best_torch, fmt_int, fmt_ms, fmt_s, goal_met,
                         goal_text, wall_ms)


# ---------------------------------------------------------------------------------- markdown

def _row(cells) -> str:
    return "| " + " | ".join(str(c).replace("|", "/").replace("\n", " ") for c in cells) + " |"


def _short(text: str, n: int = 70) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def latency_table(results: dict) -> list[str]:
    head = ["model", "variant", "wall ms, sync each call (median)", "wall ms, back-to-back",
            "do_bench ms (median)", "GPU kernels/fwd¹", "host launches/fwd¹", "rel. L2 err (tol)",
            "setup+1st call s", "goal", "met?"]
    lines = [_row(head), _row(["---"] * len(head))]
    for name, model in results["models"].items():
        if model.get("error"):
            lines.append(_row([name, "all", f"**FAILED** before its variants: {_short(model['error'], 90)}"]
                              + [""] * (len(head) - 3)))
        for vname, v in model["variants"].items():
            label = SHORT.get(vname, vname) + ("²" if vname in CUDAGRAPH_VARIANTS else "")
            is_aot = vname.startswith("aot")
            goal = goal_text(name, model) if is_aot else ""
            met = (goal_met(name, model, v) or "") if is_aot else ""
            status = v.get("status")
            if status != "ok":
                what = "FAILED" if status == "FAILED" else "skipped"
                reason = _short(v.get("reason", ""), 90)
                err = v.get("max_error")
                err_cell = "" if err is None else f"{err:.1e} ({v.get('tolerance', 0):.0e})"
                lines.append(_row([name, label, f"**{what}**: {reason}", "", "", "", "", err_cell,
                                   fmt_s(v.get("setup_s")), goal, met]))
                continue
            err = v.get("max_error")
            err_cell = ("ref" if vname == "eager"
                        else ("—" if err is None else f"{err:.1e} ({v.get('tolerance', 0):.0e})"))
            lines.append(_row([
                name, label, fmt_ms(wall_ms(v)), fmt_ms((v.get("b2b_ms") or {}).get("median")),
                fmt_ms(v.get("do_bench_ms")), fmt_int(v.get("gpu_kernels")), fmt_int(v.get("host_launch_calls")),
                err_cell, fmt_s(v.get("setup_s")), goal, met]))
    return lines


def bandwidth_table(results: dict) -> list[str]:
    copy = results.get("copy_bandwidth") or {}
    copy_gbs = copy.get("GBps")
    head = ["model", "variant", "bytes moved MB", "floor µs at copy BW", "GB/s (wall sync)", "% copy",
            "GB/s (do_bench)", "% copy"]
    lines = [_row(head), _row(["---"] * len(head))]
    for name, model in results["models"].items():
        if not model.get("memory_bound"):
            continue
        nbytes = model.get("bytes_moved")
        floor_us = nbytes / (copy_gbs * 1e9) * 1e6 if nbytes and copy_gbs else None
        for vname, v in model["variants"].items():
            if v.get("status") != "ok":
                continue
            cells = [name, SHORT.get(vname, vname), f"{nbytes / 1e6:.2f}" if nbytes else "—",
                     f"{floor_us:.1f}" if floor_us else "—"]
            for t in (wall_ms(v), v.get("do_bench_ms")):
                gbs = nbytes / (t * 1e-3) / 1e9 if nbytes and t else None
                cells += ["—" if gbs is None else f"{gbs:.0f}",
                          "—" if gbs is None or not copy_gbs else f"{100 * gbs / copy_gbs:.0f}%"]
            lines.append(_row(cells))
    return lines if len(lines) > 2 else []


def cold_start_table(results: dict) -> list[str]:
    head = ["model", "variant", "first output − import torch, s (median)", "runs", "model build/load s",
            "inputs s", "first call s", "note"]
    lines = [_row(head), _row(["---"] * len(head))]
    for name, model in results["models"].items():
        cs = model.get("cold_start") or {}
        for kind, r in cs.items():
            if r.get("status") != "ok":
                lines.append(_row([name, kind, f"**{r.get('status', 'skipped')}**: {_short(r.get('reason', ''), 80)}",
                                   len(r.get("runs", [])), "", "", "", ""]))
                continue
            lines.append(_row([name, kind, fmt_s(r.get("median_s")), len(r.get("runs", [])),
                               fmt_s(r.get("setup_s")), fmt_s(r.get("inputs_s")), fmt_s(r.get("first_call_s")),
                               _short(r.get("note", ""), 60)]))
    return lines if len(lines) > 2 else []


def summary_lines(results: dict) -> list[str]:
    out = []
    for name, model in results["models"].items():
        bt_name, bt = best_torch(model)
        aots = [(v, wall_ms(r)) for v, r in model["variants"].items() if v.startswith("aot") and wall_ms(r) is not None]
        ba = min(aots, key=lambda t: t[1]) if aots else None
        parts = [f"**{name}**:"]
        parts.append(f"best torch {LABELS.get(bt_name, bt_name)} {fmt_ms(bt)} ms;" if bt is not None
                     else "no torch variant ran;")
        if ba:
            met = goal_met(name, model, model["variants"][ba[0]])
            speed = f" ({bt / ba[1]:.1f}× best torch)" if bt else ""
            b2b = (model["variants"][ba[0]].get("b2b_ms") or {}).get("median")
            parts.append(f"best aotcombo {LABELS.get(ba[0], ba[0])} {fmt_ms(ba[1])} ms{speed}"
                         f"{f' ({fmt_ms(b2b)} ms back-to-back)' if b2b else ''}; goal {goal_text(name, model)}: {met}.")
        else:
            parts.append("no aotcombo variant ran.")
        if model.get("floor_us") is not None:
            parts.append(f"Floor ≈ {model['floor_us']:.1f} µs ({model.get('floor_bound', '?')}-bound estimate).")
        if GOALS.get(name, {}).get("earlier"):
            parts.append(f"({GOALS[name]['earlier']}.)")
        out.append("- " + " ".join(parts))
    return out


def markdown(results: dict, limit: int | None = None) -> str:
    """The report; with ``limit``, shortened (notes, then the bandwidth and cold-start tables
    replaced by a pointer to results.md) until it fits in ``limit`` characters."""
    text = _markdown(results)
    for drop in (("notes",), ("notes", "bandwidth"), ("notes", "bandwidth", "cold")):
        if limit is None or len(text) <= limit:
            break
        text = _markdown(results, drop)
    return text


def _markdown(results: dict, drop: tuple = ()) -> str:
    meta, settings = results.get("meta", {}), results.get("settings", {})
    lines = []
    if results.get("demo"):
        lines += ["> **DEMO: every number below is fabricated** (bench.py --report-demo), for checking the layout.", ""]
    lines.append(f"# aotcombo benchmark — {meta.get('device_name', '?')}")
    lines.append("")
    lines.append(f"torch {meta.get('torch')}, triton {meta.get('triton')}, driver {meta.get('driver', '?')}, "
                 f"{meta.get('date', '')}; run took {fmt_s(results.get('elapsed_s'))} s "
                 f"(budget {settings.get('budget_s')} s){'; --quick' if settings.get('quick') else ''}.")
    copy = results.get("copy_bandwidth") or {}
    mm = results.get("matmul_rate") or {}
    ceil = []
    if copy.get("GBps"):
        ceil.append(f"device-to-device copy {copy['GBps']:.0f} GB/s (read+write of {copy['bytes'] / 2**30:.2f} GiB)")
    if mm.get("TFLOPs"):
        ceil.append(f"{mm.get('dtype')} matmul {mm['TFLOPs']:.0f} TFLOP/s (n={mm.get('n')})")
    if ceil:
        lines.append("Measured ceilings: " + "; ".join(ceil) + ".")
    lines.append("")
    lines.append("## Per-call latency and launches")
    lines.append("")
    lines += latency_table(results)
    lines.append("")
    lines.append("¹ GPU kernels/fwd: `aotcombo.testing.gpu.gpu_kernel_launches` (torch profiler, CUDA kernel events "
                 "of one warm call, memcpy/memset excluded). Host launch calls: cudaLaunchKernel*/cuLaunchKernel*/"
                 "cudaGraphLaunch events the profiler saw on the CPU side of that call (— = none seen).")
    lines.append("² CUDA-graph variant: kernels/fwd counts the kernels the profiler sees inside the graph replay "
                 "(CUPTI usually reports them individually); the host issues about one graph launch per call "
                 "(plus any input copies). The launch goals are judged on GPU kernels/fwd.")
    lines.append("Wall: `sync; t0; f(x); sync; t1`, median over many calls, inputs rotating; back-to-back: batches of "
                 "calls with one sync, per-call mean, median over batches; do_bench: `triton.testing.do_bench`, "
                 "return_mode='median' (CUDA events, L2 flushed before each call). Goals judged on the first.")
    bw = bandwidth_table(results)
    if bw and "bandwidth" in drop:
        lines += ["", "(Achieved-bandwidth table: see results.md.)"]
    elif bw:
        lines += ["", "## Achieved bandwidth (memory-bound models)", "",
                  "Bytes moved = inputs read once + outputs written once + weights read once.", ""]
        lines += bw
    cs = cold_start_table(results)
    if cs and "cold" in drop:
        lines += ["", "(Fresh-process table: see results.md.)"]
    elif cs:
        imp = results.get("import_torch") or {}
        lines += ["", "## Fresh-process time to first output", "",
                  f"Each run: a new `python -c` process, from just before it is spawned to its first output "
                  f"synchronized, minus `import torch` alone (median {fmt_s(imp.get('median_s'))} s over "
                  f"{len(imp.get('runs', []))} runs, same method). Inputs: the sample's get_example_inputs() moved to "
                  f"the device, in every variant. compile cold = empty TORCHINDUCTOR_CACHE_DIR/TRITON_CACHE_DIR; "
                  f"warm = the same dirs after the cold run.", ""]
        lines += cs
    lines += ["", "## Summary", ""]
    lines += summary_lines(results)
    notes = results.get("notes") or []
    if notes and "notes" in drop:
        lines += ["", f"({len(notes)} notes: see results.md.)"]
    elif notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {n}" for n in notes]
    files = results.get("files") or {}
    if files:
        lines += ["", "Files: " + ", ".join(f"{k}: {v}" for k, v in files.items())]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- JSON

def _jsonable(x):
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return str(x)


def write_json(results: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(_jsonable(results), f, indent=1)
        f.write("\n")


PRINT_LIMIT = 10_500  # keep the report within what a remote runner shows of the output (12,000 characters)


def write_all(results: dict, out_dir: str) -> tuple[str, list[str]]:
    """Write results.json, results.md, latency.png, cold_start.png; return (the markdown
    to print, at most PRINT_LIMIT characters; notes)."""
    os.makedirs(out_dir, exist_ok=True)
    notes = []
    files = {"json": os.path.join(out_dir, "results.json"), "markdown": os.path.join(out_dir, "results.md")}
    for key, fname, draw in (("latency chart", "latency.png", latency_chart),
                             ("cold-start chart", "cold_start.png", cold_start_chart)):
        p = os.path.join(out_dir, fname)
        try:
            why = draw(results, p)
        except Exception as e:  # a chart never costs the tables
            why = f"{type(e).__name__}: {e}"
        if why is None:
            files[key] = p
        else:
            notes.append(f"{key}: {why}")
    results["files"] = files
    results.setdefault("notes", []).extend(notes)
    md = markdown(results)
    with open(files["markdown"], "w") as f:
        f.write(md)
    write_json(results, files["json"])
    return markdown(results, PRINT_LIMIT), notes
