#!/usr/bin/env python3
"""How the output slots' memory layout changes the GPU time of a graph bound to the caller's inputs.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/slot_layout.py adam_step branches

Per model, in one process: the GPU time (CUDA events, median of 100 replays) of a graph bound
to one input set, writing its outputs into a slot carved from one allocation per dtype at
offsets aligned to 128 bytes ... 2 MiB (the runtime's ``outputs.SLOT_ALIGN``: 512), or into
one allocation per output, against the same graph writing the main graph's own
outputs (``copy_outputs=False``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from call_breakdown import _bound_to, gpu_us  # noqa: E402
from zoo_bench import sample  # noqa: E402


def bound_graph(package, inputs):
    loaded = package.load("cuda", graphs=True)
    for _ in range(4):
        loaded(*inputs)
    return loaded, next(iter(loaded._bound._graphs.values()))


def one_allocation_per_output(self):
    tensors = [torch.empty_strided(shape, stride, dtype=dtype, device=self.device)
               for dtype, shape, stride, _ in self.layout]
    return tensors, [t.untyped_storage()._cdata for t in tensors]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    args = parser.parse_args()
    for name in args.models:
        package = import_package(name)
        outputs = importlib.import_module(f"{name}._runtime.outputs")
        inputs = tuple(sample(name)[1][0])
        row = {}
        with torch.no_grad():
            row["static outputs"] = gpu_us(_bound_to(package, inputs).replay)
            chosen = outputs.SLOT_ALIGN
            for align in (128, 512, 4096, 65536, 1 << 21):
                outputs.SLOT_ALIGN = align
                row[f"aligned {align}"] = gpu_us(bound_graph(package, inputs)[1].replay)
            outputs.SLOT_ALIGN = chosen
            outputs.OutputSlots.new_set = one_allocation_per_output
            row["one allocation per output"] = gpu_us(bound_graph(package, inputs)[1].replay)
        print(f"{name}: GPU us per bound replay, medians: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()),
              flush=True)


if __name__ == "__main__":
    main()
