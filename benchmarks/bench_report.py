"""The benchmark's outputs from its results dict: markdown report, JSON file, PNG charts.

Pure Python (plus matplotlib for the charts, imported only when drawing), so the
report can be re-rendered anywhere from a results.json: ``bench.py --from-json``.
"""

from __future__ import annotations

import json
import math
import os

# Variant display order and labels (bench.py defines what each one runs).
LABELS = {
    "eager": "eager",
    "compile": "torch.compile",
    "compile_combo": "torch.compile combo_kernels",
    "compile_ro": "torch.compile reduce-overhead",
    "aot": "aotcombo",
    "aot_checked": "aotcombo check_inputs",
    "aot_graphs": "aotcombo graphs",
    "aot_graphs_nocopy": "aotcombo graphs copy_outputs=False",
    "aot_graphs_static": "aotcombo graphs static_inputs",
}
SHORT = {"eager": "eager", "compile": "compile", "compile_combo": "compile combo", "compile_ro": "compile RO",
         "aot": "aot", "aot_checked": "aot checked", "aot_graphs": "aot graphs",
         "aot_graphs_nocopy": "aot graphs nocopy",
         "aot_graphs_static": "aot graphs static"}
TORCH_VARIANTS = ("eager", "compile", "compile_combo", "compile_ro")
CUDAGRAPH_VARIANTS = ("compile_ro", "aot_graphs", "aot_graphs_nocopy", "aot_graphs_static")

# The goals (H100, per-call wall median, synchronized each call).
GOALS = {
    "branches": {"wall_ms": 0.03, "kernels": 2, "earlier": "reduce-overhead measured 0.17 ms earlier"},
    "transformer_block": {"wall_ms": 0.10, "earlier": "reduce-overhead measured 0.18 ms earlier"},
    "adam_step": {"wall_ms": 0.20, "kernels": 4},
    "conv_block": {"vs_best_torch": True},
}


# ---------------------------------------------------------------------------------- numbers

def fmt_ms(x) -> str:
    if x is None:
        return "—"
    if x < 0.1:
        return f"{x:.4f}"
    if x < 10:
        return f"{x:.3f}"
    return f"{x:.1f}"


def fmt_s(x) -> str:
    return "—" if x is None else (f"{x:.2f}" if x < 100 else f"{x:.0f}")


def fmt_int(x) -> str:
    return "—" if x is None else str(x)


def wall_ms(v: dict):
    """The per-call wall median (synchronized each call) of a variant result, or None."""
    if v.get("status") != "ok":
        return None
    return (v.get("wall_ms") or {}).get("median")


def best_torch(model: dict):
    """(variant, wall ms) of the fastest torch variant that passed, or (None, None)."""
    best = None
    for name in TORCH_VARIANTS:
        w = wall_ms(model["variants"].get(name, {}))
        if w is not None and (best is None or w < best[1]):
            best = (name, w)
    return best or (None, None)


def goal_text(name: str, model: dict) -> str:
    g = GOALS.get(name)
    if not g:
        return "—"
    parts = []
    if "wall_ms" in g:
        parts.append(f"≤{g['wall_ms']:.2f} ms")
    if "kernels" in g:
        parts.append(f"≤{g['kernels']} kernels")
    if g.get("vs_best_torch"):
        _, w = best_torch(model)
        parts.append(f"≤ best torch ({fmt_ms(w)} ms)" if w is not None else "≤ best torch (none ran)")
    return ", ".join(parts)


def goal_met(name: str, model: dict, v: dict):
    """'yes', 'no (why)' or '?' for an aotcombo variant; None where no goal applies."""
    g = GOALS.get(name)
    if not g:
        return None
    if v.get("status") != "ok":
        return "no (not run)"
    w = wall_ms(v)
    misses, unknown = [], False
    if "wall_ms" in g:
        if w is None:
            unknown = True
        elif w > g["wall_ms"]:
            misses.append(f"{fmt_ms(w)} ms")
    if "kernels" in g:
        k = v.get("gpu_kernels")
        if k is None:
            unknown = True
        elif k > g["kernels"]:
            misses.append(f"{k} kernels")
    if g.get("vs_best_torch"):
        _, bw = best_torch(model)
        if bw is None or w is None:
            unknown = True
        elif w > bw:
            misses.append(f"{w / bw:.2f}× best torch")
    if misses:
        return "no (" + ", ".join(misses) + ")"
    return "?" if unknown else "yes"


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


# ---------------------------------------------------------------------------------- charts

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _goal_ms(results: dict, m: str):
    g = GOALS.get(m, {})
    return best_torch(results["models"][m])[1] if g.get("vs_best_torch") else g.get("wall_ms")


def latency_chart(results: dict, path: str) -> str | None:
    """Grouped bars, log scale: per model, one bar per variant; a panel per timer that has
    numbers (wall sync-each, do_bench). Returns None on success, else why no chart."""
    try:
        plt = _plt()
        from matplotlib.patches import Patch
    except ImportError as e:
        return f"matplotlib not importable ({e}): no PNG"
    models = list(results["models"])
    variants = [v for v in LABELS if any(v in results["models"][m]["variants"] for m in models)]
    if not models or not variants:
        return "nothing to plot"
    metrics = [("wall ms/call, synchronized each call (median)", wall_ms, True),
               ("do_bench ms (median, CUDA events, L2 flushed)",
                lambda v: v.get("do_bench_ms") if v.get("status") == "ok" else None, False)]
    metrics = [mt for mt in metrics
               if any(mt[1](results["models"][m]["variants"].get(v, {})) for m in models for v in variants)]
    if not metrics:
        return "no timings to plot"
    fig, axes = plt.subplots(len(metrics), 1, figsize=(max(8, 2.6 * len(models)), 4.2 * len(metrics) + 0.6),
                             squeeze=False)
    width = 0.8 / len(variants)
    cmap = plt.get_cmap("tab10")
    color = {v: cmap(list(LABELS).index(v) % 10) for v in variants}
    hatch = {v: "//" if v.startswith("aot") else None for v in variants}
    for ax, (title, get, with_goals) in zip(axes[:, 0], metrics):
        values = [get(results["models"][m]["variants"].get(v, {})) for m in models for v in variants]
        goals = [_goal_ms(results, m) for m in models] if with_goals else []
        span = [x for x in values + goals if x]
        lo, hi = min(span) / 3, max(span) * 4
        for j, v in enumerate(variants):
            xs, ys = [], []
            for i, m in enumerate(models):
                r = results["models"][m]["variants"].get(v)
                x = i - 0.4 + width * (j + 0.5)
                val = get(r) if r else None
                if val:
                    xs.append(x)
                    ys.append(val)
                elif r is not None:
                    mark = "F" if r.get("status") == "FAILED" else "s" if r.get("status") == "skipped" else "?"
                    ax.text(x, lo * 1.15, mark, ha="center", va="bottom", fontsize=7, color=color[v])
            bars = ax.bar(xs, ys, width, color=color[v], hatch=hatch[v], edgecolor="white", linewidth=0.3)
            for b, y in zip(bars, ys):
                ax.text(b.get_x() + b.get_width() / 2, y * 1.05, fmt_ms(y), ha="center", va="bottom",
                        fontsize=5.5, rotation=90)
        for i, goal in enumerate(goals):
            if goal:
                ax.hlines(goal, i - 0.45, i + 0.45, colors="black", linestyles="dashed", linewidth=1)
                ax.text(i + 0.45, goal, " goal", va="center", fontsize=7, clip_on=True)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ax.set_xlim(-0.5, len(models) - 0.5 + (0.15 if with_goals else 0))
        ax.set_xticks(range(len(models)))
        ax.set_xticklabels(models)
        ax.set_ylabel("ms per forward (log)")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", which="both", alpha=0.3)
    handles = [Patch(facecolor=color[v], hatch=hatch[v], edgecolor="white", label=LABELS[v]) for v in variants]
    axes[0, 0].legend(handles=handles, fontsize=7, ncol=2, loc="upper left")
    meta = results.get("meta", {})
    fig.suptitle(f"{'DEMO (fabricated) — ' if results.get('demo') else ''}latency per forward: "
                 f"{meta.get('device_name', '?')}, torch {meta.get('torch')}\n"
                 f"(hatched = aotcombo; dashed = goal; F = failed, s = skipped)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


def cold_start_chart(results: dict, path: str) -> str | None:
    try:
        plt = _plt()
    except ImportError as e:
        return f"matplotlib not importable ({e}): no PNG"
    rows = []
    for m, model in results["models"].items():
        for kind, r in (model.get("cold_start") or {}).items():
            if r.get("status") == "ok" and r.get("median_s") is not None:
                rows.append((f"{m}: {kind}", max(r["median_s"], 1e-3)))
    if not rows:
        return "no cold-start results"
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    ax.barh(range(len(rows)), [r[1] for r in rows], color=["tab:red" if "cold" in r[0] else "tab:blue" for r in rows])
    for i, (_, s) in enumerate(rows):
        ax.text(s * 1.05, i, f"{s:.2f} s", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(min(r[1] for r in rows) / 2, max(r[1] for r in rows) * 3)
    ax.set_xlabel("fresh process: first output − import torch, seconds (log)")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


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
