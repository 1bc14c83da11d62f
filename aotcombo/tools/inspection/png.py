"""``aotcombo inspect --png``: the combo partition of one arch drawn with matplotlib, the
optional extra ``aotcombo[png]``, imported by ``render_png`` only."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ...errors import InspectError
from .contents import level_ranks, steps, variant_order
from .text import plural, short

# Sizes in inches (the axes span the figure: a data unit is an inch), fonts in points, all in
# DejaVu Sans Mono (it ships with matplotlib): with a fixed advance, label widths are known.
_DPI = 100
_MONO = "DejaVu Sans Mono"
_FS, _TITLE_FS = 8, 11
_CHAR = round(0.602 * _FS / 72 * _DPI) / _DPI  # the advance (0.602 em), hinted to whole pixels
_TITLE_CHAR = round(0.602 * _TITLE_FS / 72 * _DPI) / _DPI
_PAD = 0.06  # text inside a box
_GAP = 0.12  # between boxes
_MARGIN = 0.2
_GUTTER = 0.95  # "level N" left of the boxes
_MIN_WIDTH, _MAX_WIDTH = 8.0, 20.0
_COMBO_WIDTH = 10.0  # at most; more sub-kernels go on more lanes
_MAX_LANES = 8
_TOP = 0.8  # title and legend
_LEGEND_LINE = 0.16
_HEAD = 0.2  # a box's first line (the combo's name and launch); its sub-kernels' lanes below
_LANE = 0.2
_INSET = 0.03
_MIN_SEG = 0.05
_MAX_HEIGHT = 56.0  # inches: ~100 levels; past them a note (inspect lists all), so under 1 MB of PNG
_NAME_CHARS = 24  # of a sub-kernel's or extern op's name, sizing its box
_COMBO_FILL, _COMBO_EDGE = "#dbeafe", "#2563eb"
_SUB_FILLS = ("#93c5fd", "#bfdbfe")
_EXTERN_FILL, _EXTERN_EDGE = "#fde7c8", "#d97706"
_BAND = "#f4f4f5"
_DARK, _GREY = "#18181b", "#71717a"


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(0, chars - 1)] + "…"


def _fit(candidates: list[str], width: float, keep_tail: bool = False) -> str:
    """The first candidate that fits ``width`` inches; else the last one cut, keeping its
    head (and with ``keep_tail`` its end: a kernel's index); else nothing."""
    chars = int((width - 2 * _PAD) / _CHAR + 1e-6)
    for text in candidates:
        if len(text) <= chars:
            return text
    if chars < 4:
        return ""
    text = candidates[-1]
    return text[:4] + "…" + text[-(chars - 5):] if keep_tail and chars >= 10 else _cut(text, chars)


def _chars_width(text: str, cap: int) -> float:
    return min(len(text), cap) * _CHAR + 2 * _PAD


def _sub_names(sub: dict) -> list[str]:
    name = short(sub["kernel"])
    names = [name, name.replace("fused_", "", 1)]
    return ([f"{name} ×{sub['programs']}"] if sub.get("programs") is not None else []) + names


def _combo_headers(c: dict) -> list[str]:
    grid = c["grid"][0] if c.get("grid") else "?"
    regs = f" · {c['registers']} regs" if c.get("registers") is not None else ""
    subs = len(c["sub_kernels"])
    return [f"{c['name']}  grid {grid} · {c['num_warps']} warps{regs} · {plural(subs, 'kernel')}",
            f"{c['name']}  grid {grid} · {c['num_warps']} warps{regs}", f"{c['name']}  grid {grid}", c["name"]]


def _extern_names(op: str) -> list[str]:
    bare = op.removesuffix(".default")
    return [op, bare, bare.split("::", 1)[-1]]


def _combo_box(combo: dict, room: float) -> tuple[float, list[list[tuple[dict, float]]]]:
    """A combo's width and its sub-kernels in lanes: (sub-kernel, width) left to right,
    each as wide as its share of the programs (one scale for all lanes), none thinner than a
    sliver; as many lanes as it takes for their names to fit, up to _MAX_LANES."""
    subs = combo["sub_kernels"]
    head = _chars_width(_combo_headers(combo)[1], 80)
    if not subs:
        return min(head, room), []
    names = sum(_chars_width(_sub_names(s)[0], max(_NAME_CHARS, 60 // len(subs))) for s in subs)
    width = min(room, max(head, min(names, _COMBO_WIDTH)))
    inner = width - 2 * _INSET
    lanes = max(1, min(_MAX_LANES, len(subs), -(-round(names * 100) // round(width * 100))))
    least = min(_MIN_SEG, inner * lanes / len(subs) / 2)
    programs = [max(1, s.get("programs") or 1) for s in subs]
    scale = (inner * lanes - least * len(subs)) / sum(programs)
    for _ in range(60):  # shrink until the lanes, filled in order, hold them all
        out = _pack_lanes([least + scale * p for p in programs], inner)
        if len(out) <= lanes:
            break
        scale *= 0.95
    return width, [[(subs[i], seg) for i, seg in lane] for lane in out]


def _pack_lanes(widths: list[float], room: float) -> list[list[tuple[int, float]]]:
    out: list[list[tuple[int, float]]] = [[]]
    used = 0.0
    for i, w in enumerate(widths):
        if out[-1] and used + w > room + 1e-9:
            out.append([])
            used = 0.0
        w = min(w, room)
        out[-1].append((i, w))
        used += w
    return out


def _import_matplotlib():
    try:
        import matplotlib
        import matplotlib.style
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError as exc:
        raise InspectError(f"--png needs matplotlib, which cannot be imported ({exc})",
                           fix="pip install 'aotcombo[png]' (or pip install matplotlib), or leave out --png") from exc
    return matplotlib, FigureCanvasAgg, Figure, Rectangle


def render_png(info: dict, path: str | Path, arch: str | None = None) -> Path:
    """Draw the combo partition of one variant (default: the first cubin arch) into a PNG:
    one row per dependency level, one box per launch in launch order, a combo kernel's
    Inductor kernels side by side inside its box. Needs matplotlib (imported here only);
    the same ``info`` gives the same bytes."""
    keys = [k for k in variant_order(info) if k != "ptx"] or list(info["variants"])
    if arch is None:
        arch = keys[0] if keys else None
    if arch not in info["variants"]:
        raise InspectError(f"the package has no variant {arch}", fix=f"choose among {', '.join(info['variants'])}")
    matplotlib, FigureCanvasAgg, Figure, Rectangle = _import_matplotlib()
    variant = info["variants"][arch]
    combos = {c["name"]: c for c in variant["combos"]}
    rank = level_ranks(variant)
    room = _MAX_WIDTH - _GUTTER - _MARGIN

    # Layout: per level, the boxes left to right in launch order, wrapped at the width.
    boxes = []  # [x, line, width, height, step, combo, lanes]
    levels = []  # [label, first line, last line]
    line, x, widest = -1, room, 0.0
    for step in steps(variant):
        combo = combos.get(step.get("combo"))
        if combo is None and "extern" not in step:
            continue
        if combo is not None:
            width, lanes = _combo_box(combo, room)
            height = _HEAD + len(lanes) * _LANE + _INSET
        else:
            width, lanes = min(room, _chars_width(_extern_names(step["extern"])[0], _NAME_CHARS + 16)), []
            height = _HEAD + _INSET
        level = rank.get(step.get("level"), "?")
        if not levels or levels[-1][0] != level:
            line, x = line + 1, 0.0
            levels.append([level, line, line])
        elif x + width > room:
            line, x = line + 1, 0.0
            levels[-1][2] = line
        boxes.append([x, line, width, height, step, combo, lanes])
        x += width + _GAP
        widest = max(widest, x - _GAP)
    line_top, y = [], _TOP
    for n in range(line + 1):
        line_top.append(y)
        y += max(b[3] for b in boxes if b[1] == n) + _GAP
    shown = [b for b in boxes if line_top[b[1]] + b[3] <= _MAX_HEIGHT]
    dropped = len(boxes) - len(shown)
    bottom = max([line_top[b[1]] + b[3] + _GAP for b in shown], default=_TOP + _HEAD + _LANE)

    st = variant.get("stats") or {}
    n_combos = st.get("combos", len(variant["combos"]))
    kernels = st.get("kernels", sum(len(c["sub_kernels"]) for c in variant["combos"]))
    externs = st.get("extern_calls", sum(1 for s in steps(variant) if "extern" in s))
    launches = n_combos + externs
    uncombined = (f"{plural(kernels, 'kernel')} un-combined" if not externs else
                  f"{kernels + externs} un-combined: {plural(kernels, 'kernel')} + {plural(externs, 'extern call')}")
    title = (f"{info['name']} {info.get('version', '')}  {arch}: {launches} launch{'es' if launches != 1 else ''} "
             f"per forward ({uncombined})")
    legend = (f"blue: {plural(n_combos, 'combo kernel')}, with its Inductor kernels side by side, as wide as "
              f"their share of its programs; orange: {plural(externs, 'extern call')}. One row per dependency "
              "level: the launches in a row are independent of each other.")
    width_in = min(_MAX_WIDTH, max(_MIN_WIDTH, _GUTTER + widest + _MARGIN, len(title) * _TITLE_CHAR + 2 * _MARGIN))
    title = _cut(title, int((width_in - 2 * _MARGIN) / _TITLE_CHAR))
    legend = textwrap.wrap(legend, int((width_in - 2 * _MARGIN) / _CHAR))
    below = _LEGEND_LINE * (len(legend) - 1)  # the boxes, under a legend of more than one line
    height_in = bottom + below + (0.3 if dropped else 0.05)

    with matplotlib.style.context("default"):  # not the user's matplotlibrc
        fig = Figure(figsize=(width_in, height_in), dpi=_DPI, facecolor="white")
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        ax.set_xlim(0, width_in)
        ax.set_ylim(height_in - below, -below)
        text = {"fontsize": _FS, "family": _MONO, "color": _DARK, "va": "center"}
        ax.text(_MARGIN, 0.3 - below, title, **{**text, "fontsize": _TITLE_FS}, fontweight="bold")
        for k, words in enumerate(legend):
            ax.text(_MARGIN, 0.58 - below + k * _LEGEND_LINE, words, **{**text, "color": _GREY})
        for i, (level, first, last) in enumerate(levels):
            top = line_top[first] - _GAP / 2
            if top + _GAP / 2 >= bottom:
                break
            end = min(line_top[last + 1] if last + 1 < len(line_top) else bottom, bottom) - _GAP / 2
            if i % 2:
                ax.add_patch(Rectangle((0, top), width_in, end - top, color=_BAND, lw=0, zorder=0))
            ax.text(_MARGIN, line_top[first] + _HEAD / 2 + 0.02, f"level {level}", **{**text, "color": _GREY})
        if not shown:
            ax.text(_GUTTER, _TOP + _HEAD, "no launches", **{**text, "color": _GREY})
        for x, line_no, width, height, step, combo, lanes in shown:
            x0, y0 = _GUTTER + x, line_top[line_no]
            if combo is None:
                ax.add_patch(Rectangle((x0, y0), width, height, facecolor=_EXTERN_FILL, edgecolor=_EXTERN_EDGE, lw=1.2))
                ax.text(x0 + _PAD, y0 + height / 2 + 0.01, _fit(_extern_names(step["extern"]), width), **text)
                continue
            ax.add_patch(Rectangle((x0, y0), width, height, facecolor=_COMBO_FILL, edgecolor=_COMBO_EDGE, lw=1.5))
            ax.text(x0 + _PAD, y0 + _HEAD / 2 + 0.02, _fit(_combo_headers(combo), width), **text, fontweight="bold")
            j = 0
            for k, lane in enumerate(lanes):
                sx, sy = x0 + _INSET, y0 + _HEAD + k * _LANE
                for sub, seg in lane:
                    ax.add_patch(Rectangle((sx, sy), seg, _LANE - 0.02, facecolor=_SUB_FILLS[j % 2], edgecolor="white",
                                           lw=0.6 if seg > 0.04 else 0))
                    label = _fit(_sub_names(sub), seg, keep_tail=True)
                    if label:
                        ax.text(sx + _PAD, sy + _LANE / 2 - 0.01, label, **text)
                    sx, j = sx + seg, j + 1
        if dropped:
            more = f"{dropped} more launch" + ("es" if dropped != 1 else "")
            ax.text(_MARGIN, height_in - below - 0.17, f"... and {more} not drawn (aotcombo inspect lists them all)",
                    **{**text, "color": _GREY})
        path = Path(path)
        # No "Software" (matplotlib's version) and no date in the file: the same info, the same bytes.
        fig.savefig(path, format="png", dpi=_DPI, facecolor="white", metadata={"Software": None},
                    pil_kwargs={"compress_level": 9})
    return path
