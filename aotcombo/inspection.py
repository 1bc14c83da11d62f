"""``aotcombo inspect``: what a built package holds, without installing or loading it.

    aotcombo inspect dist/mymodel-0.1.0-py3-none-any.whl     # a wheel (read with zipfile)
    aotcombo inspect mymodel                                 # an installed package (found, not imported)
    aotcombo inspect path/to/unpacked/                       # a folder holding <name>/manifest.json

Reports archs, inputs, weights, versions, the launches per forward against the
un-combined count, and per arch every combo kernel: its dependency level, the
Inductor kernels it launches together with their block sizes, its grid, warps,
registers, local and shared memory. ``--json`` prints the same as JSON;
``--png FILE`` draws the combo partition (one row per dependency level, one box
per launch, the sub-kernels inside) with a small built-in PNG writer and
bitmap font: no imaging library needed. Imports neither torch nor triton.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
import struct
import zipfile
import zlib
from pathlib import Path

from .errors import InspectError

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
    source = locate(target)
    try:
        manifest = json.loads(source.read("manifest.json"))
    except (OSError, ValueError) as exc:
        raise InspectError(f"cannot read manifest.json of {source.where}: {exc}", fix="rebuild the package") from exc
    stats = dict(manifest.get("stats", {}))
    stats.setdefault("launches_per_forward", stats.get("combos", 0) + stats.get("extern_calls", 0))
    stats.setdefault("launches_uncombined", stats.get("kernels", 0) + stats.get("extern_calls", 0))
    weights = _weights(source, manifest)
    variants = {}
    for key, variant in manifest.get("variants", {}).items():
        kernels = variant.get("kernels", [])
        schedule = variant.get("schedule") or _schedule_from_program(source, manifest, variant)
        variants[key] = {
            "program": variant.get("program"),
            "stats": variant.get("stats"),
            "image_bytes": sum(source.size(k["image"]) or 0 for k in kernels),
            "combos": [
                {
                    "name": k.get("name"),
                    "level": k.get("level"),
                    "grid": k.get("grid"),
                    "num_warps": k.get("num_warps"),
                    "registers": k.get("registers"),
                    "local_bytes": k.get("local_bytes"),
                    "shared_bytes": k.get("shared"),
                    "dispatch": k.get("dispatch"),
                    "image": k.get("image"),
                    "sub_kernels": k.get("blocks") or [{"kernel": s} for s in k.get("sub_kernels", [])],
                }
                for k in kernels
            ],
            "schedule": schedule,
        }
    return {
        "source": {"kind": source.kind, "path": source.where},
        "name": manifest.get("name"),
        "version": manifest.get("version"),
        "versions": manifest.get("versions", {}),
        "archs": [f"sm_{a}" for a in manifest.get("archs", [])],
        "ptx_arch": f"sm_{manifest['ptx_arch']}" if manifest.get("ptx_arch") is not None else None,
        "inputs": manifest.get("inputs", []),
        "weights": weights,
        "extern_ops": manifest.get("extern_ops", []),
        "stats": stats,
        "variants": variants,
        "batch": manifest.get("batch"),
    }


def _batch_line(batch: dict | None) -> list[str]:
    if not batch:
        return []
    inputs = ", ".join(str(i) for i in batch.get("inputs", []))
    if "range" in batch:
        low, high = batch["range"]
        return [f"batch: dynamic, dim 0 of inputs {inputs}, from {low} to {high}; grids computed per call "
                "(the top-level shapes and launches below are for the whole range)"]
    return [f"batch: buckets {', '.join(map(str, batch['sizes']))} (dim 0 of inputs {inputs})"
            + (", sizes between buckets padded to the next one" if batch.get("pad") else ", exact sizes only")
            + f"; shown below: batch {max(batch['sizes'])}"]


def _weights(source: _Source, manifest: dict) -> dict:
    name = manifest.get("weights")
    stats = manifest.get("stats", {})
    out = {"file": name, "file_bytes": None, "tensors": stats.get("weight_tensors"), "bytes": stats.get("weights_bytes")}
    if not name:
        return out
    out["file_bytes"] = source.size(name)
    if out["bytes"] is None:  # older manifests: count the storages inside torch's zip
        try:
            inner = zipfile.ZipFile(io.BytesIO(source.read(name)))
            data = [i for i in inner.infolist() if re.search(r"/data/\d+$", i.filename)]
            out["bytes"] = sum(i.file_size for i in data)
            out["storages"] = len(data)
        except (OSError, zipfile.BadZipFile):
            pass
    return out


_LAUNCH = re.compile(r"kernels\[(\d+)\]\(")
_EXTERN = re.compile(r"=?\s*(aten|torch\.ops\.\w+)\.(\w+)\.(\w+)\(")


def _schedule_from_program(source: _Source, manifest: dict, variant: dict) -> list[dict]:
    """Launch order for manifests without a schedule: read it off the program."""
    try:
        text = source.read(f"{variant['program']}.py").decode()
    except (OSError, KeyError):
        return []
    kernels = variant.get("kernels", [])
    out = []
    for line in text.splitlines():
        if m := _LAUNCH.search(line):
            index = int(m.group(1))
            out.append({"combo": kernels[index]["name"] if index < len(kernels) else f"#{index}", "level": None})
        elif m := _EXTERN.search(line):
            namespace = "aten" if m.group(1) == "aten" else m.group(1).removeprefix("torch.ops.")
            out.append({"extern": f"{namespace}::{m.group(2)}.{m.group(3)}", "level": None})
    return out


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
        *_batch_line(info.get("batch")),
        f"weights: {w['tensors'] if w['tensors'] is not None else '?'} tensors, {_mb(w['bytes'])}"
        + (f" ({w['file']}: {_mb(w['file_bytes'])})" if w.get("file") else ""),
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
        lines += ["", f"{key}: program {variant['program']}.py, {len(variant['combos'])} kernel images "
                      f"({_mb(variant['image_bytes'])})"]
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
    return variant["schedule"] or [{"combo": c["name"], "level": c["level"]} for c in variant["combos"]]


def _level_ranks(variant: dict) -> dict:
    """Dependency levels renumbered 0, 1, 2... over the launches (the traced graph's
    levels also count allocations and views)."""
    levels = sorted({s.get("level") for s in _steps(variant) if s.get("level") is not None})
    return {lv: str(i) for i, lv in enumerate(levels)}


def _plural(n, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2,
             "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def _inputs_line(inputs: list[dict], show: int = 6) -> str:
    def one(i):
        return f"{i['name']} {i['dtype']}[{', '.join(map(str, i['shape']))}] stride {tuple(i['stride'])}"

    if len(inputs) <= show:
        return "inputs: " + "; ".join(one(i) for i in inputs)
    size = 0
    for i in inputs:
        n = 1
        for d in i["shape"]:
            n *= d if isinstance(d, int) else 1
        size += n * _ITEMSIZE.get(i["dtype"], 4)
    return (f"inputs: {len(inputs)} tensors, {_mb(size)}: " + "; ".join(one(i) for i in inputs[: show - 2])
            + f"; ...; {one(inputs[-1])}")


def _combo_line(c: dict, level: str) -> str:
    def show(x):
        return "?" if x is None else str(x)

    grid = c["grid"][0] if c.get("grid") else None
    return (f"  {level:>5}  {c['name']:<10} {show(grid):>8} {show(c['num_warps']):>5} {show(c['registers']):>5} "
            f"{show(c['local_bytes']):>6} {show(c['shared_bytes']):>7}  {len(c['sub_kernels'])} sub-kernel"
            f"{'s' if len(c['sub_kernels']) != 1 else ''}, {c.get('dispatch') or '?'}")


# --- PNG: a canvas, a 5x7 font, and a zlib-compressed image --------------------------------

# ASCII 32..126, 7 rows of 5 pixels each, one base-32 digit per row (MSB left).
_FONT = (
    "00000004444404aa00000aavavaa4fke5u4op248j3cik8lid44000002488842842224804lel40044v440"
    "0000c48000v00000000cc01248g0ehjlphe4c4444eeh1248vv2421he26aiv22vgu11he68guhhev124888"
    "ehhehheehhf12c0cc0cc00cc0c48248g84200v0v008421248eh12404eh1dlleehhvhhhuhhuhhuehggghe"
    "sihhhisvgguggvvggugggehgnhhfhhhvhhhe44444e72222ichikokihggggggvhrllhhhhhpljhhehhhhhe"
    "uhhugggehhhliduhhukihfgge11uv444444hhhhhhehhhhha4hhhlllahha4ahhhha4444v1248gve88888e"
    "0g84210e22222e4ah0000000000v840000000e1fhfggmphhu00egghe11djhhf00ehvge698s8880fhhf1e"
    "ggmphhh40c444e20622icggikokic44444e00qllhh00mphhh00ehhhe00uhugg00djf1100mpggg00ege1u"
    "88s889600hhhjd00hhha400hhlla00ha4ah00hhf1e00v248v244844244444448442448008l200"
)


_DESCENDERS = set("gjpqy")


def _glyph(ch: str) -> list[int]:
    code = ord(ch)
    if not 32 <= code <= 126:
        code = ord("?")
    i = (code - 32) * 7
    return [int(d, 32) for d in _FONT[i: i + 7]]


class Canvas:
    def __init__(self, width: int, height: int, background=(255, 255, 255)):
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color) -> None:
        x0, y0, x1, y1 = max(0, x), max(0, y), min(self.width, x + w), min(self.height, y + h)
        if x1 <= x0 or y1 <= y0:
            return
        row = bytes(color) * (x1 - x0)
        for yy in range(y0, y1):
            start = (yy * self.width + x0) * 3
            self.pixels[start: start + len(row)] = row

    def box(self, x, y, w, h, fill, border, thickness=2) -> None:
        self.rect(x, y, w, h, border)
        self.rect(x + thickness, y + thickness, w - 2 * thickness, h - 2 * thickness, fill)

    def text(self, x: int, y: int, text: str, color=(0, 0, 0), scale: int = 2) -> int:
        """Draw ``text`` with its top left at (x, y); returns the x after it."""
        for ch in text:
            down = scale if ch in _DESCENDERS else 0
            for r, bits in enumerate(_glyph(ch)):
                for c in range(5):
                    if bits & (16 >> c):
                        self.rect(x + c * scale, y + down + r * scale, scale, scale, color)
            x += 6 * scale
        return x

    def png(self) -> bytes:
        raw = bytearray()
        stride = self.width * 3
        for y in range(self.height):
            raw.append(0)  # filter: none
            raw += self.pixels[y * stride: (y + 1) * stride]

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(
            b"IEND", b"")


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * 6 * scale


_COMBO_FILL, _COMBO_BORDER = (219, 234, 254), (37, 99, 235)
_SUB_FILLS = ((191, 219, 254), (165, 202, 250))
_EXTERN_FILL, _EXTERN_BORDER = (254, 235, 200), (217, 119, 6)
_GREY, _DARK = (120, 120, 120), (20, 20, 20)

_S = 2  # font scale: 12 x 16 pixels a character
_LINE = 18
_PAD = 8
_GUTTER = 110
_MAX_WIDTH = 1800
_MAX_CHARS = 96  # per line inside a box
_NAME_CHARS = 44  # of a sub-kernel's name
_MAX_SUBS = 48  # sub-kernel lines drawn per combo


def _clip(text: str, chars: int = _MAX_CHARS) -> str:
    return text if len(text) <= chars else text[: chars - 2] + ".."


def render_png(info: dict, path: str | Path, arch: str | None = None) -> Path:
    """Draw the combo partition of one variant (default: the first cubin arch)."""
    keys = [k for k in _variant_order(info) if k != "ptx"] or list(info["variants"])
    if arch is None:
        arch = keys[0] if keys else None
    if arch not in info["variants"]:
        raise InspectError(f"the package has no variant {arch}", fix=f"choose among {', '.join(info['variants'])}")
    variant = info["variants"][arch]
    combos = {c["name"]: c for c in variant["combos"]}
    schedule = _steps(variant)
    rank = _level_ranks(variant)

    # Boxes: (lines, kind); a combo's first line is its header, then one per sub-kernel.
    rows: list[tuple[str, list]] = []
    for step in schedule:
        level = rank.get(step.get("level"), "?")
        if not rows or rows[-1][0] != level:
            rows.append((level, []))
        if "extern" in step:
            rows[-1][1].append(("extern", [step["extern"]]))
        elif step.get("combo") in combos:
            c = combos[step["combo"]]
            header = (f"{c['name']}: grid {c['grid'][0] if c.get('grid') else '?'}, {c['num_warps']} warps"
                      + (f", {c['registers']} regs" if c.get("registers") is not None else ""))
            subs = []
            shown = c["sub_kernels"] if len(c["sub_kernels"]) <= _MAX_SUBS else c["sub_kernels"][: _MAX_SUBS - 1]
            for s in shown:
                block = " ".join(f"{k}={v}" for k, v in (s.get("block") or {}).items())
                extra = f"  {block}" if block else ""
                if s.get("programs") is not None:
                    extra += f"  x{s['programs']}"
                subs.append(_clip(_short(s["kernel"]), _NAME_CHARS) + extra)
            if len(shown) < len(c["sub_kernels"]):
                subs.append(f"... and {len(c['sub_kernels']) - len(shown)} more sub-kernels")
            rows[-1][1].append(("combo", [header] + subs))

    def box_size(lines):
        width = max(text_width(_clip(t), _S) for t in lines) + 2 * _PAD + 8
        height = len(lines) * _LINE + 2 * _PAD + (4 if len(lines) > 1 else 0)
        return width, height

    # Layout: boxes left to right, wrapped at _MAX_WIDTH, one band per level.
    placed = []  # (x, y, w, h, kind, lines)
    bands = []  # (level, y, h)
    st = variant.get("stats") or {}
    title = [
        f"{info['name']} {arch}: {_plural(st.get('kernels', '?'), 'kernel')} in "
        f"{_plural(len(variant['combos']), 'combo launch').replace('launchs', 'launches')}"
        + (f" + {_plural(st['extern_calls'], 'extern call')} = {st['launches_per_forward']} launches per forward "
           f"(un-combined: {st['launches_uncombined']})" if st else ""),
        "one row per dependency level: launches in a row are independent; blue boxes are combo kernels (the "
        "kernels inside share one launch), orange boxes extern calls",
    ]
    y = 16 + 3 * _LINE + 2 * _LINE
    width = 0
    for level, items in rows:
        x, band_top, line_h = _GUTTER, y, 0
        for kind, lines in items:
            w, h = box_size(lines)
            if x > _GUTTER and x + w > _MAX_WIDTH:
                x, y = _GUTTER, y + line_h + _PAD
                line_h = 0
            placed.append((x, y, w, h, kind, lines))
            x += w + 2 * _PAD
            line_h = max(line_h, h)
            width = max(width, x)
        y += line_h + 3 * _PAD
        bands.append((level, band_top, y - band_top - 2 * _PAD))
    width = max(width + 16, text_width(title[0], 2) + 32, text_width(title[1], 1) + 32, 600)
    height = y + 10

    canvas = Canvas(width, height)
    canvas.text(16, 12, title[0], _DARK, scale=2)
    canvas.text(16, 12 + 2 * _LINE, title[1], _GREY, scale=1)
    for i, (level, top, h) in enumerate(bands):
        if i:
            canvas.rect(16, top - 2 * _PAD + 2, width - 32, 1, (210, 210, 210))
        canvas.text(16, top + _PAD, f"level {level}", _GREY, scale=_S)
        if i + 1 < len(bands):  # an arrow down to the next level
            ax = 16 + 5 * 6 * _S // 2
            canvas.rect(ax, top + _PAD + 2 * _LINE, 2, max(0, h - 2 * _LINE), _GREY)
            for k in range(5):
                canvas.rect(ax - k, top + _PAD + h - k, 2 + 2 * k, 1, _GREY)
    for x, y0, w, h, kind, lines in placed:
        if kind == "extern":
            canvas.box(x, y0, w, h, _EXTERN_FILL, _EXTERN_BORDER)
            canvas.text(x + _PAD + 4, y0 + _PAD + 2, _clip(lines[0]), _DARK, scale=_S)
            continue
        canvas.box(x, y0, w, h, _COMBO_FILL, _COMBO_BORDER, thickness=3)
        canvas.text(x + _PAD + 4, y0 + _PAD + 2, _clip(lines[0]), _DARK, scale=_S)
        for j, line in enumerate(lines[1:]):
            ly = y0 + _PAD + 4 + (j + 1) * _LINE
            canvas.rect(x + _PAD, ly - 1, w - 2 * _PAD, _LINE - 1, _SUB_FILLS[j % 2])
            canvas.text(x + _PAD + 4, ly + 1, _clip(line), _DARK, scale=_S)
    path = Path(path)
    path.write_bytes(canvas.png())
    return path
