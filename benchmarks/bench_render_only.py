"""bench.py's report-only modes: the report re-rendered from a results.json (``--from-json``), or
one of fabricated numbers in the shape bench.py writes (``--report-demo``), for checking its layout.
"""

from __future__ import annotations

import random

import bench_goals
import bench_report
from bench_variants import COLD_START_DEFAULT, MEMORY_BOUND


def render_only(args) -> int:
    import json

    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
    else:
        results = demo_results()
    md, notes = bench_report.write_all(results, args.out)
    for n in notes:
        print(n, flush=True)
    print(md, flush=True)
    return 0


def demo_results() -> dict:
    """Fabricated numbers in the shape bench.py writes: for checking the report's layout."""
    rng = random.Random(0)
    base = {"branches": 0.45, "transformer_block": 0.25, "adam_step": 9.0, "conv_block": 0.12}
    factor = {"eager": 1, "compile": 0.4, "compile_combo": 0.3, "compile_ro": 0.35, "aot": 0.1,
              "aot_checked": 0.15, "aot_graphs": 0.06, "aot_graphs_nocopy": 0.055, "aot_graphs_static": 0.05}
    kernels = {"eager": 96, "compile": 24, "compile_combo": 2, "compile_ro": 24, "aot": 1, "aot_checked": 1,
               "aot_graphs": 3, "aot_graphs_nocopy": 2, "aot_graphs_static": 1}
    models = {}
    for name, b in base.items():
        vs = {}
        for v, f in factor.items():
            w = b * f * (0.9 + 0.2 * rng.random())
            vs[v] = {"label": bench_goals.LABELS[v], "status": "ok", "setup_s": 20.0 if "compile" in v else 0.3,
                     "wall_ms": {"median": w, "n": 200}, "b2b_ms": {"median": w * 0.7}, "do_bench_ms": w * 0.8,
                     "gpu_kernels": kernels[v],
                     "host_launch_calls": 1 if "graphs" in v or v == "compile_ro" else kernels[v],
                     "max_error": 0.0 if v == "eager" else 3e-3, "tolerance": 1e-2}
        models[name] = {"variants": vs,
                        "bytes_moved": 4e6 if name == "branches" else 2.7e8 if name == "adam_step" else 2e7,
                        "memory_bound": name in MEMORY_BOUND, "floor_us": 5.0, "floor_bound": "memory"}
    models["conv_block"]["variants"]["compile_combo"] = {"status": "FAILED",
                                                         "reason": "relative L2 error 3.1e-02 > 1e-02 on input set 0",
                                                         "max_error": 3.1e-2, "tolerance": 1e-2, "setup_s": 12.0}
    models["adam_step"]["variants"]["aot_graphs_static"] = {
        "status": "skipped", "reason": "the installed runtime's Model has no static_inputs()"}
    for name in COLD_START_DEFAULT:
        models[name]["cold_start"] = {
            "eager": {"status": "ok", "median_s": 1.1, "runs": [{}] * 3, "setup_s": 0.4, "inputs_s": 0.1,
                      "first_call_s": 0.5},
            "aotcombo": {"status": "ok", "median_s": 0.6, "runs": [{}] * 3, "setup_s": 0.3, "inputs_s": 0.1,
                         "first_call_s": 0.1},
            "torch.compile cold cache": {"status": "ok", "median_s": 31.0, "runs": [{}], "setup_s": 1.0,
                                         "inputs_s": 0.1,
                                         "first_call_s": 29.0, "note": "cache after: 120 files, 3.1 MB"},
            "torch.compile warm cache": {"status": "ok", "median_s": 6.5, "runs": [{}] * 3, "setup_s": 1.0,
                                         "inputs_s": 0.1,
                                         "first_call_s": 5.2},
        }
    return {"demo": True, "meta": {"device_name": "NVIDIA H100 80GB HBM3 (DEMO)", "torch": "2.11", "triton": "3.6",
                                   "driver": "demo", "date": "demo"},
            "settings": {"budget_s": 450}, "elapsed_s": 0.0, "models": models,
            "copy_bandwidth": {"GBps": 2900.0, "bytes": 2 * 2**30},
            "matmul_rate": {"TFLOPs": 700.0, "dtype": "bfloat16", "n": 8192},
            "import_torch": {"median_s": 1.8, "runs": [1.8] * 5},
            "notes": ["DEMO: fabricated numbers."]}
