"""What scripts/performance_doc.py and performance_llm.py share: reading result files and
formatting table cells."""

from __future__ import annotations

import json
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
