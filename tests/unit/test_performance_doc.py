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


def test_the_one_run_table_sets_each_model_against_its_floor_on_the_runs_gpu(tmp_path):
    run, floors = tmp_path / "full_size" / "one_run", tmp_path / "roofline"
    run.mkdir(parents=True)
    floors.mkdir()
    rows = [{"model": "full/gpt2", "eager_ms": 6.0, "ours_default_ms": 0.8, "ours_static_ms": 0.75,
             "compile_ro_ms": 1.2, "compile_ma_ms": 1.6},
            {"model": "full/sd_unet", "eager_ms": 23.0, "ours_default_ms": 6.0, "ours_static_ms": 6.0,
             "compile_ro_ms": 7.5}]
    (run / "zoo_bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "zoo_bench_1.log").write_text("NVIDIA H200, torch 2.11.0+cu130\n")
    floor = {"dtype": "float16", "moved_mb": 1.0, "gflop": 1.0, "bound": "compute"}
    (floors / "roofline.jsonl").write_text(
        json.dumps({**floor, "model": "gpt2", "floor_us_H100": 300.0, "floor_us_H200": 250.0}) + "\n"
        + json.dumps({**floor, "model": "sd_unet", "floor_us_H100": 1600.0, "floor_us_H200": 1500.0}) + "\n")
    written = sections(performance_doc.document(tmp_path, performance_doc.Page(PAGE)))["Full-size models in one run"]
    assert "| gpt2 | 0.250 | 6.000 | 1.200 | 1.600 | 0.800 | 0.750 | 1.50× | 2.00× | 3.00× |" in written
    assert "| sd_unet | 1.500 | 23.000 | 7.500 | – | 6.000 | 6.000 | 1.25× | – | 4.00× |" in written
    assert "Without max-autotune: sd_unet." in written and "Not in these runs: bert_base, llama_1b" in written
    assert "Device: NVIDIA H200, torch 2.11.0+cu130." in written
