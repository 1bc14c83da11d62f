"""``aotcombo inspect``: what a built package holds, without installing or loading it.

    aotcombo inspect dist/mymodel-0.1.0-py3-none-any.whl     # a wheel (read with zipfile)
    aotcombo inspect mymodel                                 # an installed package (found, not imported)
    aotcombo inspect path/to/unpacked/                       # a folder holding <name>/manifest.json

Reports archs, inputs, weights, versions, the launches per forward against the
un-combined count, and per arch every combo kernel: its dependency level, the
Inductor kernels it launches together with their block sizes, its grid, warps,
registers, local and shared memory. ``--json`` prints the same as JSON;
``--png FILE`` draws the combo partition of one arch (one row per dependency
level, one box per launch, the sub-kernels inside) with matplotlib, the optional
extra ``aotcombo[png]``, imported by ``render_png`` only. Imports neither torch nor
triton.
"""

from __future__ import annotations

import importlib.util
import re
import textwrap
import zipfile
from pathlib import Path

from ..errors import InspectError
from ..runtime.manifest import ITEMSIZE, Manifest, ManifestError

# --- finding the package ----------------------------------------------------------------


class _Source:
    """Read access to one package: in a wheel, or in a folder."""

    def __init__(self, kind: str, where: str, read, size):
        self.kind, self.where, self.read, self.size = kind, where, read, size


def locate(target: str | Path) -> _Source:
    path = Path(target)
    if path.is_file():
        if not zipfile.is_zipfile(path):
            raise InspectError(f"{path} is not a wheel (not a zip file)",
                               fix="pass a .whl built by aotcombo, a folder, or an installed package's name")
        return _from_wheel(path)
    if path.is_dir():
        return _from_folder(path)
    if isinstance(target, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", target):
        try:
            spec = importlib.util.find_spec(target)  # finds; does not import the package
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            folder = Path(list(spec.submodule_search_locations)[0])
            if (folder / "manifest.json").is_file():
                source = _from_folder(folder)
                source.kind = "installed package"
                return source
            raise InspectError(f"the installed package {target} ({folder}) is not an aotcombo package (no manifest.json)",
                               fix="pass the name of a package built by aotcombo")
    raise InspectError(
        f"no wheel, folder or installed package named {target}",
        fix="pass the path of a .whl, a folder holding <name>/manifest.json, or the import name of an installed package",
    )


def _from_wheel(path: Path) -> _Source:
    try:
        zf = zipfile.ZipFile(path)
        names = zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise InspectError(f"cannot read the wheel {path}: {exc}", fix="rebuild it") from exc
    manifests = sorted(n for n in names if n.count("/") == 1 and n.endswith("/manifest.json"))
    if not manifests:
        raise InspectError(f"{path} holds no <package>/manifest.json: it was not built by aotcombo",
                           fix="pass a wheel built by aotcombo build")
    prefix = manifests[0][: -len("manifest.json")]
    infos = {i.filename: i for i in zf.infolist()}

    def read(rel: str) -> bytes:
        try:
            return zf.read(prefix + rel)
        except KeyError:
            raise FileNotFoundError(rel) from None

    def size(rel: str) -> int | None:
        info = infos.get(prefix + rel)
        return info.file_size if info else None

    return _Source("wheel", str(path), read, size)


def _from_folder(folder: Path) -> _Source:
    if not (folder / "manifest.json").is_file():
        inside = sorted(p.parent for p in folder.glob("*/manifest.json"))
        if len(inside) != 1:
            what = "no" if not inside else f"{len(inside)}"
            raise InspectError(f"{folder} holds {what} aotcombo package(s) (looked for manifest.json and */manifest.json)",
                               fix="pass the package's own folder")
        folder = inside[0]

    def read(rel: str) -> bytes:
        return (folder / rel).read_bytes()

    def size(rel: str) -> int | None:
        p = folder / rel
        return p.stat().st_size if p.is_file() else None

    return _Source("folder", str(folder), read, size)


# --- what it holds ----------------------------------------------------------------------


def inspect_package(target: str | Path) -> dict:
    """Everything ``aotcombo inspect`` reports, as plain data."""
    import dataclasses

    source = locate(target)
    try:
        manifest = Manifest.from_json(source.read("manifest.json"))
    except (OSError, ManifestError) as exc:
        raise InspectError(f"cannot read manifest.json of {source.where}: {exc}", fix="rebuild the package") from exc
    shape = manifest.specialization()
    variants = {}
    for key, variant in shape.variants.items():
        variants[key] = {
            "program": variant.program,
            "stats": dataclasses.asdict(variant.stats),
            "image_bytes": sum(source.size(k.image) or 0 for k in variant.kernels),
            "combos": [
                {
                    "name": k.name, "level": k.level, "grid": list(k.grid), "num_warps": k.num_warps,
                    "registers": k.registers, "local_bytes": k.local_bytes, "shared_bytes": k.shared,
                    "dispatch": k.dispatch, "image": k.image, "pdl": k.pdl,
                    "sub_kernels": [dataclasses.asdict(sub) for sub in k.subs],
                }
                for k in variant.kernels
            ],
            "schedule": [{step.kind: step.name, "level": step.level} for step in variant.schedule],
        }
    stats = shape.variants["ptx"].stats
    w = manifest.weights
    return {
        "source": {"kind": source.kind, "path": source.where},
        "name": manifest.name,
        "version": manifest.version,
        "versions": manifest.built_with,
        "archs": [f"sm_{a}" for a in manifest.archs],
        "ptx_arch": f"sm_{manifest.ptx_arch}",
        "inputs": [dataclasses.asdict(i) for i in manifest.inputs],
        "weights": {"file": w.file, "file_bytes": w.file_bytes, "tensors": len(w.tensors), "bytes": w.bytes,
                    "external": len(w.external), "state": list(w.state),
                    "tied": {t.name: t.same_as for t in w.tensors if t.same_as is not None}},
        "extern_ops": list(manifest.extern_ops),
        "stats": {**dataclasses.asdict(stats), "launches_per_forward": stats.launches_per_forward,
                  "launches_uncombined": stats.launches_uncombined},
        "variants": variants,
        "shapes": dataclasses.asdict(manifest.shapes),
    }


def _shapes_line(shapes: dict) -> list[str]:
    inputs = ", ".join(str(i) for i in shapes.get("batched_inputs", []))
    if shapes["mode"] == "dynamic":
        return [f"batch: dynamic, dim 0 of inputs {inputs}, from {shapes['min']} to {shapes['max']}; grids computed "
                "per call (the top-level shapes and launches below are for the whole range)"]
    if shapes["mode"] == "buckets":
        return [f"batch: buckets {', '.join(map(str, shapes['sizes']))} (dim 0 of inputs {inputs})"
                + (", sizes between buckets padded to the next one" if shapes["pad"] else ", exact sizes only")
                + f"; shown below: batch {max(shapes['sizes'])}"]
    return []


# --- text --------------------------------------------------------------------------------


def _mb(n) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _short(kernel: str) -> str:
    return kernel.removeprefix("triton_")


def _blocks(sub: dict) -> str:
    parts = []
    if sub.get("heuristic"):
        parts.append(sub["heuristic"])
    if sub.get("numel"):
        parts.append(" ".join(f"{k.rstrip('_')}={v}" for k, v in sub["numel"].items()))
    if sub.get("block"):
        parts.append(" ".join(f"{k}={v}" for k, v in sub["block"].items()))
    if sub.get("programs") is not None:
        parts.append(f"{sub['programs']} programs")
    if sub.get("num_warps") is not None:
        parts.append(f"{sub['num_warps']} warps")
    return ", ".join(parts)


def format_text(info: dict, arch: str | None = None) -> str:
    s = info["stats"]
    v = info["versions"]
    w = info["weights"]
    lines = [
        f"{info['name']} {info['version']}  ({info['source']['kind']} {info['source']['path']})",
        f"built by aotcombo {v.get('aotcombo', '?')} with torch {v.get('torch', '?')}, triton {v.get('triton', '?')}",
        f"archs: cubins for {', '.join(info['archs']) or 'none'}"
        + (f"; PTX for {info['ptx_arch']} and newer" if info["ptx_arch"] else ""),
        _inputs_line(info["inputs"]),
        *_shapes_line(info["shapes"]),
        f"weights: {w['tensors'] if w['tensors'] is not None else '?'} tensors, {_mb(w['bytes'])}"
        + (f" ({w['file']}: {_mb(w['file_bytes'])})" if w.get("file") else "")
        + (f"; tied: {', '.join(f'{a} = {b}' for a, b in w['tied'].items())}" if w.get("tied") else "")
        + (f"; {w['external']} given at load (--weights external)" if w.get("external") else "")
        + (f"; state, updated by forward: {', '.join(w['state'])}" if w.get("state") else ""),
        f"launches per forward: {s.get('launches_per_forward')} = {_plural(s.get('combos'), 'combo kernel')} + "
        f"{_plural(s.get('extern_calls'), 'extern call')}; un-combined: {s.get('launches_uncombined')} = "
        f"{_plural(s.get('kernels'), 'kernel')} + {_plural(s.get('extern_calls'), 'extern call')}",
    ]
    if info["extern_ops"]:
        lines.append("extern ops: " + ", ".join(info["extern_ops"]))
    for key in _variant_order(info):
        variant = info["variants"][key]
        if arch and key != arch:
            continue
        if key == "ptx" and not arch and len(info["variants"]) > 1:
            lines += ["", f"ptx: the {info['ptx_arch']} kernels as PTX ({_mb(variant['image_bytes'])}), JIT-compiled by the "
                          f"driver on GPUs that no cubin fits; program {variant['program']}.py"]
            continue
        early = sum(bool(c.get("pdl")) for c in variant["combos"])
        lines += ["", f"{key}: program {variant['program']}.py, {len(variant['combos'])} kernel images "
                      f"({_mb(variant['image_bytes'])})"
                      + (f"; {early} launched early, waiting on the GPU for the launch before (PDL)" if early else "")]
        lines.append(f"  {'level':>5}  {'launch':<10} {'grid':>8} {'warps':>5} {'regs':>5} {'local':>6} {'shared':>7}  "
                     "sub-kernels: kind, sizes, block sizes, programs, warps")
        combos = {c["name"]: c for c in variant["combos"]}
        rank = _level_ranks(variant)
        listed = set()
        for step in _steps(variant):
            level = rank.get(step.get("level"), "")
            if "extern" in step:
                lines.append(f"  {level:>5}  extern     {step['extern']}")
                continue
            c = combos.get(step["combo"])
            if c is None:
                continue
            listed.add(c["name"])
            lines.append(_combo_line(c, level))
            for sub in c["sub_kernels"]:
                lines.append(f"  {'':>5}    - {_short(sub['kernel'])}" + (f": {_blocks(sub)}" if _blocks(sub) else ""))
        for c in variant["combos"]:
            if c["name"] not in listed:
                lines.append(_combo_line(c, rank.get(c["level"], "")))
    return "\n".join(lines) + "\n"


def _variant_order(info: dict) -> list[str]:
    keys = list(info["variants"])
    cubins = sorted((k for k in keys if k.startswith("sm_")), key=lambda k: int(k[3:]) if k[3:].isdigit() else 0)
    return cubins + [k for k in keys if k not in cubins]


def _steps(variant: dict) -> list[dict]:
    return variant["schedule"]


def _level_ranks(variant: dict) -> dict:
    """Dependency levels renumbered 0, 1, 2... over the launches (the traced graph's
    levels also count allocations and views)."""
    levels = sorted({s.get("level") for s in _steps(variant) if s.get("level") is not None})
    return {lv: str(i) for i, lv in enumerate(levels)}


def _plural(n, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _inputs_line(inputs: list[dict], show: int = 6) -> str:
    def one(i):
        return f"{i['name']} {i['dtype']}[{', '.join(map(str, i['shape']))}] stride {tuple(i['stride'])}"

    direct = sum(bool(i.get("direct")) for i in inputs)
    note = f" ({direct} of {len(inputs)} read in place in graph mode: only the package's kernels read them)" \
        if direct else ""
    return _listed(inputs, show, one) + note


def _listed(inputs: list[dict], show: int, one) -> str:
    if len(inputs) <= show:
        return "inputs: " + "; ".join(one(i) for i in inputs)
    size = 0
    for i in inputs:
        n = 1
        for d in i["shape"]:
            n *= d if isinstance(d, int) else 1
        size += n * ITEMSIZE.get(i["dtype"], 4)
    return (f"inputs: {len(inputs)} tensors, {_mb(size)}: " + "; ".join(one(i) for i in inputs[: show - 2])
            + f"; ...; {one(inputs[-1])}")


def _combo_line(c: dict, level: str) -> str:
    def show(x):
        return "?" if x is None else str(x)

    grid = c["grid"][0] if c.get("grid") else None
    return (f"  {level:>5}  {c['name']:<10} {show(grid):>8} {show(c['num_warps']):>5} {show(c['registers']):>5} "
            f"{show(c['local_bytes']):>6} {show(c['shared_bytes']):>7}  {len(c['sub_kernels'])} sub-kernel"
            f"{'s' if len(c['sub_kernels']) != 1 else ''}, {c.get('dispatch') or '?'}")


# --- PNG: the partition drawn with matplotlib (the optional extra aotcombo[png]) ----------

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
    name = _short(sub["kernel"])
    names = [name, name.replace("fused_", "", 1)]
    return ([f"{name} ×{sub['programs']}"] if sub.get("programs") is not None else []) + names


def _combo_headers(c: dict) -> list[str]:
    grid = c["grid"][0] if c.get("grid") else "?"
    regs = f" · {c['registers']} regs" if c.get("registers") is not None else ""
    subs = len(c["sub_kernels"])
    return [f"{c['name']}  grid {grid} · {c['num_warps']} warps{regs} · {_plural(subs, 'kernel')}",
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
    keys = [k for k in _variant_order(info) if k != "ptx"] or list(info["variants"])
    if arch is None:
        arch = keys[0] if keys else None
    if arch not in info["variants"]:
        raise InspectError(f"the package has no variant {arch}", fix=f"choose among {', '.join(info['variants'])}")
    matplotlib, FigureCanvasAgg, Figure, Rectangle = _import_matplotlib()
    variant = info["variants"][arch]
    combos = {c["name"]: c for c in variant["combos"]}
    rank = _level_ranks(variant)
    room = _MAX_WIDTH - _GUTTER - _MARGIN

    # Layout: per level, the boxes left to right in launch order, wrapped at the width.
    boxes = []  # [x, line, width, height, step, combo, lanes]
    levels = []  # [label, first line, last line]
    line, x, widest = -1, room, 0.0
    for step in _steps(variant):
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
    externs = st.get("extern_calls", sum(1 for s in _steps(variant) if "extern" in s))
    launches = n_combos + externs
    uncombined = (f"{_plural(kernels, 'kernel')} un-combined" if not externs else
                  f"{kernels + externs} un-combined: {_plural(kernels, 'kernel')} + {_plural(externs, 'extern call')}")
    title = (f"{info['name']} {info.get('version', '')}  {arch}: {launches} launch{'es' if launches != 1 else ''} "
             f"per forward ({uncombined})")
    legend = (f"blue: {_plural(n_combos, 'combo kernel')}, with its Inductor kernels side by side, as wide as "
              f"their share of its programs; orange: {_plural(externs, 'extern call')}. One row per dependency "
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
        text = dict(fontsize=_FS, family=_MONO, color=_DARK, va="center")
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
