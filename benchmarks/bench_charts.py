"""bench.py's PNG charts from its results dict: latency per forward by variant, and fresh-process
time to first output. matplotlib is imported only when drawing; without it, no chart and a note why.
"""

from __future__ import annotations

from bench_goals import GOALS, LABELS, best_torch, fmt_ms, wall_ms


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
