"""The variants' labels, the issue's goals for each sample and whether a result meets them, and the
number formats of bench.py's report and charts (bench_report, bench_charts). Pure Python.
"""

from __future__ import annotations

# Variant display order and labels (bench_variants.py defines what each one runs).
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
