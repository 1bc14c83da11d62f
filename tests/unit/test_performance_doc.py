"""scripts/performance_doc.py: a section whose results this checkout lacks keeps the page's text;
one whose results are here is written from them."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import performance_doc  # noqa: E402

PAGE = (ROOT / "docs" / "performance.md").read_text()


def sections(text: str) -> dict[str, str]:
    return {part.split("\n", 1)[0]: part for part in text.split("\n## ")[1:]}


def test_sections_without_results_keep_the_page_and_those_with_results_are_written(tmp_path):
    folder = tmp_path / "memory"
    folder.mkdir()
    row = {"batch": 2, "seq": 9, "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0",
           "full_bert_base_dyn_old_op_by_op_mb": 50.0, "full_bert_base_dyn_op_by_op_mb": 5.0,
           "full_bert_base_dyn_old_graph_pool_mb": 60.0, "full_bert_base_dyn_graph_pool_mb": 6.0,
           "full_bert_base_dyn_old_ms": 1.25, "full_bert_base_dyn_ms": 1.0}
    for name in ("mem_static.jsonl", "mem_dyn.jsonl"):
        (folder / name).write_text(json.dumps(row) + "\n")
    written = sections(performance_doc.document(tmp_path, performance_doc.Page(PAGE)))
    before = sections(PAGE)
    assert set(written) == set(before) | {"Memory per call"}
    assert all(written[title] == text for title, text in before.items() if title != "Memory per call")
    assert "| dyn at 2 × 9 | 50.0 | 5.0 | 60.0 | 6.0 | 1.250 | 1.000 |" in written["Memory per call"]
    assert "Device: NVIDIA H100 80GB HBM3, torch 2.11.0." in written["Memory per call"]


def test_a_section_missing_from_both_results_and_page_is_an_error(tmp_path):
    with pytest.raises(performance_doc.MissingResults, match="Samples"):
        performance_doc.document(tmp_path, performance_doc.Page(""))
