"""What scripts/performance_doc.py and performance_llm.py share: reading result files and
formatting table cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def jsonl(path: Path) -> list[dict]:
    """The JSON objects of a file, one a line; other lines (warnings, tables) are skipped."""
    rows = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows



def ms(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def ratio(a, b) -> str:
    return "–" if not a or not b else f"{a / b:.2f}×"


def span(values: list[float]) -> str:
    values = [v for v in values if v]
    return "–" if not values else f"{min(values):.2f}–{max(values):.2f}×"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


CALL_SECTIONS = ("Samples", "The zoo", "Full-size models", "More full-size models")  # section_calls's


class MissingResults(Exception):
    pass


class Page:
    """docs/performance.md as it stands, by section: a section whose results this checkout lacks
    keeps its text."""

    def __init__(self, text: str, pairs: tuple[str, ...] = CALL_SECTIONS):
        self.sections, self.lines, self.pairs = {}, text.splitlines(), pairs  # pairs: (lines, ratios) sections
        starts = [i for i, line in enumerate(self.lines) if line.startswith("## ")] + [len(self.lines)]
        for start, end in zip(starts, starts[1:]):
            self.sections[self.lines[start][3:]] = self.lines[start:end]

    def section(self, title: str, make):
        """``make()``, or, where its results are missing, the section as it stands."""
        try:
            made = make()
        except MissingResults:
            made = None
        if made or title not in self.sections:  # [] : the section's own check found no results
            if made is None:
                raise MissingResults(f"the results of section {title!r} are missing, and the page has none")
            return made
        kept = self.sections[title]
        return (kept, []) if title in self.pairs else kept

    def line(self, start: str) -> str | None:
        return next((line for line in self.lines if line.startswith(start)), None)


def call_table(rows: dict[str, dict], order: list[str]) -> tuple[list[str], list[float]]:
    """eager, reduce-overhead, (max-autotune, where measured), default, serving path; RO / default,
    (MA / default), default / serving."""
    out, speedups = [], []
    autotuned = any("compile_ma_ms" in rows[m] for m in order)
    for model in order:
        r = rows[model]
        ro, default, static = r.get("compile_ro_ms"), r.get("ours_default_ms"), r.get("ours_static_ms")
        if ro and default:
            speedups.append(ro / default)
        ma = [ms(r.get("compile_ma_ms"))] if autotuned else []
        ma_ratio = [ratio(r.get("compile_ma_ms"), default)] if autotuned else []
        out.append([model, ms(r.get("eager_ms")), ms(ro), *ma, ms(default), ms(static), ratio(ro, default), *ma_ratio,
                    ratio(default, static)])
    header = ["model", "eager", "reduce-overhead", *(["max-autotune"] if autotuned else []), "ours, default `m(x)`",
              "ours, serving path", "RO / default", *(["MA / default"] if autotuned else []), "default / serving"]
    return table(header, out), speedups


DEVICE = re.compile(r"(NVIDIA [^,(\n]*?)\s*(?:\([^)\n]*\))?,\s*torch ([0-9][^\s,;]*)")


def device_of(results: Path, name: str) -> str:
    """The GPU and torch a result file was measured with, from the file itself, its log, or its folder."""
    path = results / name
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        meta = data.get("meta", data)
        if meta.get("device_name") or meta.get("device"):
            return f"{meta.get('device_name') or meta.get('device')}, torch {meta.get('torch')}"
    if path.suffix == ".jsonl" and path.is_file():
        rows = jsonl(path)
        if rows and rows[0].get("device"):
            return f"{rows[0]['device']}, torch {rows[0].get('torch', '?')}"
    candidates = [path.with_suffix(".log")] + sorted(path.parent.glob("*.log")) + sorted(path.parent.glob("*.json"))
    for candidate in candidates:
        if candidate.is_file():
            match = DEVICE.search(candidate.read_text(errors="replace")[:4000])
            if match:
                return f"{match.group(1).strip()}, torch {match.group(2)}"
    readme = path.parent / "README.md"
    if readme.is_file():
        match = re.search(r"\b(H100|H200)\b", readme.read_text())
        torch = re.search(r"torch (\d+\.\d+)", readme.read_text())
        if match:
            where = shown(readme)
            return f"NVIDIA {match.group(1)}{', torch ' + torch.group(1) if torch else ''} (named in {where})"
    return "device not recorded"


def sources_line(results: Path, names: list[str]) -> str:
    shown_names = ", ".join(f"`{shown(results / n)}`" for n in names)
    devices = sorted({device_of(results, n) for n in names})
    return f"Source: {shown_names}. Device: {'; '.join(devices)}."
