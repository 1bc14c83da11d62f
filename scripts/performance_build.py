"""The build-time section of docs/performance.md (scripts/performance_doc.py writes the page): what
``aotcombo build`` costs with two dynamic axes against the static build, from scripts/build_times.py."""

from __future__ import annotations

import statistics
from pathlib import Path

from performance_format import jsonl, ratio, shown, table

STAGES = (("command_s", "the command"), ("load_s", "load"), ("trace_s", "trace"), ("compile_s", "compile"),
          ("package_s", "package"), ("total_s", "after the load"))


def section_build_times(results: Path, sources: list[str]) -> list[str]:
    rows = [r for name in sources if (results / name).is_file() for r in jsonl(results / name)]
    if not rows:
        return []
    newest = max(r["date"] for r in rows)
    rows = [r for r in rows if r["date"] == newest]  # the last run of the script
    median = {kind: {key: statistics.median(r[key] for r in rows if r["build"] == kind)
                     for key, _ in (*STAGES, ("wheel_bytes", ""))} for kind in ("static", "dynamic")}
    body = [[kind, *(f"{median[kind][key]:.1f}" for key, _ in STAGES), f"{median[kind]['wheel_bytes'] / 1e3:.0f}"]
            for kind in median]
    body.append(["dynamic / static", *(ratio(median["dynamic"][key], median["static"][key]) for key, _ in STAGES),
                 ratio(median["dynamic"]["wheel_bytes"], median["static"]["wheel_bytes"])])
    runs, cpus = len(rows) // 2, rows[0]["cpus"]
    return ["## Build time", "",
            ("`aotcombo build sample_models/full_size/bert_base.py --weights external --no-cache --arch sm_90`, for "
             "the file's example shape (8 × 128) and with `--dynamic batch=1:32,seq=1:512`, each the whole command "
             f"in a fresh process, the two taking turns, {runs} of each on {cpus} CPUs (`scripts/build_times.py`); "
             "seconds, medians, and the wheel in kB. The stages are those the build prints (`-v`); *after the load*: "
             "the trace, the kernels' compiles and the wheels, without the interpreter's start and the model file's "
             "load. The dynamic build traces two size classes (calls of up to 8 tokens run fused linears of ours), "
             "the second in a forked process beside the first. The seconds vary with the machine from day to day; "
             "the ratios compare builds that took turns."), "",
            *table(["build", *(label for _, label in STAGES), "wheel"], body), "",
            f"Source: `{shown(results / sources[0])}` ({newest}).", ""]
