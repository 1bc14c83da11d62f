"""Probe: CUDA graphs captured outside torch.compile, replayed after its cudagraph trees record a new
dynamic size.

    PYTHONPATH=<site with transformer_block_buckets> python benchmarks/probe_cudagraph_trees.py plain|aot

Per batch size (1, 8, 32): capture a graph of the sample transformer block at that size (``plain``:
a torch.cuda.CUDAGraph of the eager model; ``aot``: the aotcombo bucket package, a graph per bucket
captured at its first call), let ``torch.compile(dynamic=True, mode="reduce-overhead")`` record the
same size, then replay ours 30 times. Seen on an H100 with torch 2.11: both cases fail at size 32
(a CUDA error at the next synchronize; in benchmarks/shapes_bench.py, a segfault in the replay), so
the failure is torch's, not the package's; ``shapes_bench.py --compile`` therefore measures the
torch.compile reference in a process of its own.
"""
import faulthandler
import importlib
import importlib.util
import sys
from pathlib import Path

import torch

SAMPLE = Path(__file__).resolve().parents[1] / "sample_models" / "transformer_block.py"


def eager_model():
    spec = importlib.util.spec_from_file_location("sample_transformer_block", SAMPLE)
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    return sample.get_model().eval().cuda()


def plain_graphs(model):
    """``run(x)``: a torch.cuda.CUDAGraph of ``model`` per batch size, captured at its first call."""
    graphs = {}

    def run(x):
        if x.shape[0] not in graphs:
            static = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                model(static)
                graph = torch.cuda.CUDAGraph()
                graph.capture_begin(capture_error_mode="thread_local")
                out = model(static)
                graph.capture_end()
            side.synchronize()
            graphs[x.shape[0]] = graph, static, out
        graph, static, out = graphs[x.shape[0]]
        static.copy_(x)
        graph.replay()
        return out.clone()

    return run


def main(case: str) -> None:
    faulthandler.enable()
    model = eager_model()
    with torch.no_grad():
        ours = (importlib.import_module("transformer_block_buckets").load("cuda") if case == "aot"
                else plain_graphs(model))
        compiled = torch.compile(model, dynamic=True, mode="reduce-overhead")
        for n in (1, 8, 32):
            x = torch.randn(n, 256, 768, device="cuda", dtype=torch.bfloat16)
            ours(x)
            for _ in range(3):
                torch.compiler.cudagraph_mark_step_begin()
                compiled(x)
            torch.cuda.synchronize()
            print(case, "size", n, "recorded by torch.compile", flush=True)
            for _ in range(30):
                ours(x)
            torch.cuda.synchronize()
            print(case, "size", n, "our replays ok", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "plain")
