#!/usr/bin/env python3
"""Where a Llama 3.2 1B decode step's GPU time goes, per kernel, for the bf16, int8 and int4
packages of ``quantized_llm_bench.py`` (the same packages and model functions): each loaded op by
op (``graphs=False``: every kernel visible to torch's profiler) with its model's weights, a step at
cache position ``--position`` timed ``--calls`` times under the profiler; per distinct kernel
(combo) its first line (a fused linear's summary: shapes, weight, tiles), launches and GPU
microseconds per step, and for a linear the weight bytes it streamed per second. The step's
kernels are all ours, each launched early (PDL): each time includes its wait for the kernel
before it, so these read longer than the kernels run (``kernel_profile.py`` says more).

``--replay``: the serving path instead (graph mode, static inputs), each of ``--calls`` replays after
10 ms of rest, at positions 5 and ``--position``; the median replay's span (first kernel's start to
last one's end), its kernels, the sum of the gaps where no kernel ran, and per kernel image its
launches and microseconds. Launched early (PDL), a kernel's time there includes its wait too: a
package built ``--no-pdl`` (``--also LABEL=PACKAGE:MODEL_FN``) shows each kernel's own time and the
gaps that PDL hides. What it found (H100, torch 2.11, 2026-12-06, position 5; the ``--no-pdl`` int8
package, us a step): q/k/v 4.35 a layer, attention 3.77 and its merge 1.37, o 3.33, gate/up 14.32, down
7.91, LM head 87.8, gaps 0.4 a launch (42.5 in all, 99 launches), span 694.5; with PDL 632.9.

    PYTHONPATH=<site with the wheels and torchao>:. python3 benchmarks/quantized_llm_profile.py [--variants int4,int8]
        [--replay] [--also LABEL=PACKAGE:MODEL_FN]
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import torch  # noqa: E402

from kernel_profile import kernel_table, median_replay, print_replay  # noqa: E402
from quantized_llm_bench import VARIANTS, add_variants, filled  # noqa: E402

from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

LINEAR = re.compile(r"# \[(\d+), (\d+)\] x \[\d+, (\d+)\]( twice \(gate and up\))? \w+( \(weight int(\d))?")


def summaries(package) -> dict:
    """combo name -> the first line saying what it computes (its sub-kernels' summaries)."""
    folder = Path(package.__file__).parent / "kernels" / "sm_90"
    out = {}
    for path in folder.glob("combo_*.py"):
        lines = [ln.strip() for ln in path.read_text().splitlines()]
        said = [ln for ln in lines if ln.startswith("# [")] or lines[:1]
        out[path.stem] = " | ".join(dict.fromkeys(said))[:150]
    return out


def weight_bytes(summary: str) -> int:
    match = LINEAR.search(summary)
    if not match:
        return 0
    _, k, n, twice, _, bits = match.groups()
    return int(k) * int(n) * (2 if twice else 1) * int(bits or 16) // 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="bf16,int8,int4")
    parser.add_argument("--position", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--replay", action="store_true", help="the serving path's graph replays (positions 5 and "
                                                              "--position)")
    parser.add_argument("--also", action="append", default=[], metavar="LABEL=PACKAGE:MODEL_FN",
                        help="another package of a model function, profiled after ours (repeatable)")
    args = parser.parse_args()
    import aotcombo

    labels = args.variants.split(",") + add_variants(args.also)
    source = model_file("llama_1b_decode", FULL_SIZE_DIR)
    for label in labels:
        package_name, model_fn = VARIANTS[label]
        package = importlib.import_module(package_name)
        model = getattr(source, model_fn)(device="cuda")
        weights = aotcombo.quantized_state_dict(model)
        del model
        if args.replay:
            m = package.load("cuda", weights=weights, copy_outputs=False)
            for position in dict.fromkeys((5, args.position)):
                print_replay(f"{label} @ {position}", median_replay(m, filled(m, source, position)[0], args.calls))
            del m
            torch.cuda.empty_cache()
            continue
        m = package.load("cuda", weights=weights, graphs=False)
        inputs = tuple(t.cuda() for t in source.get_example_inputs(pos=args.position, seed=args.position))
        rows = kernel_table(m, inputs, args.calls)
        names = summaries(package)
        total = sum(r[2] for r in rows)
        print(f"\n{label} ({package_name}): {total:.1f} us of GPU kernels per step, {sum(r[1] for r in rows)} "
              f"kernels ({torch.cuda.get_device_name()})")
        for key, count, us in rows:
            said = names.get(key, key)
            nbytes = weight_bytes(said) * count
            rate = f"{nbytes / us / 1e3:6.0f} GB/s" if nbytes else " " * 11
            print(f"{us:8.1f} us {count:3d}x {us / count:6.2f} us {rate}  {key}: {said}")
        del m
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
