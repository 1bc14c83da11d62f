"""Time ``aotcombo build`` as a user runs it: full-size BERT-base built for its example shape
(8 x 128) against the same file built with ``--dynamic batch=1:32,seq=1:512`` (no GPU needed).

    .venv/bin/python scripts/build_times.py [--runs 5] [--out benchmarks/results/build_times]

Each build is the whole command in a fresh process (interpreter start, the model file's load,
trace, kernel compiles, wheels), ``--weights external --no-cache --arch sm_90``, the two builds
taking turns (static, dynamic, static, ...) so that a slow spell of the machine falls on both.
Per build: the command's wall time and the stage times it prints (``-v``'s ``times:`` line:
load, trace, compile, package; their total leaves the load out). Prints the medians and the
dynamic build's over the static one's, for the command and for the stages after the load;
appends a JSON line per build to ``OUT/build_times.jsonl`` (with the date and the machine's CPUs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_models" / "full_size" / "bert_base.py"
BUILDS = {"static": [], "dynamic": ["--dynamic", "batch=1:32,seq=1:512"]}
STAGES = re.compile(r"times: (.*)$", re.MULTILINE)


def build(kind: str, out: str) -> dict:
    """One build in a fresh process: its wall time and the stage times it printed."""
    command = [sys.executable, "-m", "aotcombo", "build", str(MODEL), "--weights", "external", "--no-cache",
               "--arch", "sm_90", "--out", out, "-v", *BUILDS[kind]]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"build_times: the {kind} build failed:\n{done.stderr[-2000:]}")
    found = STAGES.search(done.stderr + done.stdout)
    stages = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+) s", found.group(1))} if found else {}
    wheel = max(Path(out).glob("*manylinux*.whl"), key=lambda p: p.stat().st_mtime)
    return {"build": kind, "command_s": round(seconds, 2), **{f"{k}_s": v for k, v in stages.items()},
            "wheel_bytes": wheel.stat().st_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="builds of each kind (default: %(default)s)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "build_times"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    date = datetime.date.today().isoformat()
    rows = []
    with tempfile.TemporaryDirectory(prefix="build-times-") as wheels:
        for run in range(args.runs):
            for kind in BUILDS:
                row = {"date": date, "cpus": cpus, "run": run, **build(kind, os.path.join(wheels, kind))}
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(out / "build_times.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    median = {kind: {key: statistics.median(r[key] for r in rows if r["build"] == kind and key in r)
                     for key in ("command_s", "total_s", "wheel_bytes")} for kind in BUILDS}
    for key, label in (("command_s", "the command"), ("total_s", "after the load"), ("wheel_bytes", "wheel")):
        static, dynamic = median["static"][key], median["dynamic"][key]
        print(f"{label}: static {static:g}, dynamic {dynamic:g}, dynamic / static {dynamic / static:.2f}x")


if __name__ == "__main__":
    main()
