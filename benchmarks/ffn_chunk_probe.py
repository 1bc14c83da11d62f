#!/usr/bin/env python3
"""BERT-base's FFN (addmm -> exact GELU -> addmm, fp16) over many rows, whole or in row chunks that
reuse one intermediate buffer: does a chunk's 4096 x 3072 intermediate staying in L2 make the GELU
between the GEMMs cheaper than the GEMMs lose on fewer rows? Each variant one CUDA graph, the
graphs replayed in turn, median us a replay. On a machine with a GPU:

    python3 benchmarks/ffn_chunk_probe.py
"""
import statistics

import torch

CHUNKS = (1, 2, 4, 8, 16)
MIN_CHUNK_ROWS = 512


def captured(fn) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def main(calls: int = 200) -> None:
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    half = dict(device="cuda", dtype=torch.float16)
    for m in (16384, 8192, 4096):
        x = torch.randn(m, 768, **half)
        w1, b1 = torch.randn(768, 3072, **half) / 28, torch.randn(3072, **half)
        w2, b2 = torch.randn(3072, 768, **half) / 55, torch.randn(768, **half)
        h, g, out = torch.empty(m, 3072, **half), torch.empty(m, 3072, **half), torch.empty(m, 768, **half)

        def ffn(chunks: int) -> None:
            rows = m // chunks
            for c in range(chunks):
                torch.addmm(b1, x[c * rows:(c + 1) * rows], w1, out=h[:rows])
                torch.ops.aten.gelu.out(h[:rows], out=g[:rows])
                torch.addmm(b2, g[:rows], w2, out=out[c * rows:(c + 1) * rows])

        graphs, reference = {}, None
        for chunks in (c for c in CHUNKS if m // c >= MIN_CHUNK_ROWS):
            graphs[chunks] = captured(lambda chunks=chunks: ffn(chunks))
            graphs[chunks].replay()
            torch.cuda.synchronize()
            reference = out.clone() if reference is None else reference
            assert (out - reference).abs().max().item() < 1e-2, f"{chunks} chunks differ"
        times = {chunks: [] for chunks in graphs}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(calls):
            for chunks, graph in graphs.items():
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times[chunks].append(start.elapsed_time(end) * 1e3)
        print(f"rows {m}: " + "  ".join(f"{c} chunks {statistics.median(t):.1f} us" for c, t in times.items()),
              flush=True)


if __name__ == "__main__":
    main()
