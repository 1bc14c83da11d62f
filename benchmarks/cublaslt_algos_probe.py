#!/usr/bin/env python3
"""Every algorithm cuBLASLt's heuristic offers for a GEMM with no workspace (the runtime's path,
``runtime/cublaslt.py``, takes the one ``PREFERRED`` names where offered, else the first), timed: is
the first the fastest, and where it is not, which configuration is? The full-size models' linears
(``--widths``: d768, BERT-base's, ViT-B/16's, GPT-2's and Whisper-small's; d1024, BERT-large's;
llama1b, Llama 3.2 1B's) at their row counts,
``torch.addmm`` (its workspace, its heuristic) beside them. Each algorithm: 20 calls in one CUDA
graph, replays timed in turn, median us a call. On a machine with a GPU:

    python3 benchmarks/cublaslt_algos_probe.py [--algos 12] [--rows 1024,1576,16384] [--rounds 2] \
        [--widths d768,llama1b] [--dtype bfloat16]

Each candidate is printed with its configuration (``CONFIG``: cublasLtMatmulAlgoConfigAttributes_t).

H100, torch 2.11, 2026-12-05 (fp16, d768 at 1024, 1576, 2048, 3000, 4096, 8192 and 16384 rows, 12
offers, two rounds): the first was the fastest in 7 of the 28 cases; elsewhere another offer was
1.01-1.19x faster (FFN-down at 1024 and 1576 rows 11.93 -> 10.18 and 15.62 -> 13.14 us, FFN-up at
4096 rows 35.96 -> 30.61). One configuration was the fastest wherever offered (7 of the 28 cases,
1.06-1.18x the first): 128 x 128 tiles, custom option 3, clusters of 1 x 2 (tile 20, custom 3,
cluster 5). No other configuration offered in 4 or more cases was the fastest in more than half of
them. ``torch.addmm`` (its workspace) took within 0.6 % of the first below 4096 rows, and up to
9.4 % longer from 4096 (there its heuristic picks persistent kernels, each with a memset).
H100, 2026-12-06 (fp16, 24 offers, two rounds, d768, d1024 and llama1b at 1024, 1576, 4096 and 16384
rows, 48 cases): that configuration was offered in 16 and the fastest in all 16 (1.00-1.18x the first:
BERT-large's o at 4096 rows 16.36 -> 14.13 us, the 1B's gate/up at 1024 112.4 -> 103.8); the first was
the fastest in 9. Where it was not offered, 256 x 128 tiles with custom option 7 and 1 x 2 clusters
(tile 24, custom 7, cluster 5) were 1.004-1.048x the first in the 9 cases of 4096 rows or more, 0.92x in
the one of fewer (d768's q/k/v at 1576).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # aotcombo from this checkout

import torch  # noqa: E402

from aotcombo.runtime import cublaslt as lt  # noqa: E402

SHAPES = {  # (n, k) of each linear, by model width
    "d768": {"qkv": (2304, 768), "o": (768, 768), "up": (3072, 768), "down": (768, 3072)},  # BERT/ViT/GPT-2 base
    "d1024": {"qkv": (3072, 1024), "o": (1024, 1024), "up": (4096, 1024), "down": (1024, 4096)},  # BERT-large
    "llama1b": {"qkv": (3072, 2048), "o": (2048, 2048), "gate_up": (16384, 2048), "down": (2048, 8192)},
}
CALLS, REPLAYS = 20, 50
CONFIG = (("id", 0, ctypes.c_int32), ("tile", 1, ctypes.c_uint32), ("splitk", 2, ctypes.c_int32),
          ("reduction", 3, ctypes.c_uint32), ("swizzle", 4, ctypes.c_uint32), ("custom", 5, ctypes.c_uint32),
          ("stages", 6, ctypes.c_uint32), ("inner", 7, ctypes.c_uint16), ("cluster", 8, ctypes.c_uint16))


def config(lib, algo) -> tuple:
    """The algorithm's configuration attributes (cublasLtMatmulAlgoConfigAttributes_t), in CONFIG's order."""
    values = []
    for _, attribute, kind in CONFIG:
        value, written = kind(), ctypes.c_size_t()
        status = lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attribute, ctypes.byref(value),
                                                          ctypes.sizeof(value), ctypes.byref(written))
        values.append(value.value if status == 0 else None)
    return tuple(values)


def offered(lib, handle, key: tuple, count: int):
    """(descriptor, layouts, [heuristic results]) for ``key`` (as ``lt._plan``'s), up to ``count``."""
    dtype, (op_a, a_rows, a_cols, lda), (op_b, b_rows, b_cols, ldb), (n, m, ldd), bias = key
    desc = ctypes.c_void_p()
    lt._check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), lt._COMPUTE_32F, lt._R_32F), "desc")
    lt._set(lib, desc, lt._TRANSA, ctypes.c_int32(op_a))
    lt._set(lib, desc, lt._TRANSB, ctypes.c_int32(op_b))
    lt._set(lib, desc, lt._EPILOGUE, ctypes.c_uint32(lt._EPILOGUE_BIAS))
    lt._set(lib, desc, lt._BIAS_POINTER, ctypes.c_void_p(bias))
    layouts = [lt._layout(lib, dtype, *s) for s in ((a_rows, a_cols, lda), (b_rows, b_cols, ldb), (n, m, ldd))]
    preference = ctypes.c_void_p()
    lt._check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "preference")
    none = ctypes.c_uint64(0)
    lt._check(lib.cublasLtMatmulPreferenceSetAttribute(preference, lt._PREF_MAX_WORKSPACE_BYTES, ctypes.byref(none),
                                                       ctypes.sizeof(none)), "preference attribute")
    results, found = (lt._Heuristic * count)(), ctypes.c_int(0)
    a, b, d = layouts
    lt._check(lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, preference, count, results,
                                                 ctypes.byref(found)), "heuristic")
    return desc, layouts, [results[i] for i in range(found.value)]


def graph_of(fn) -> torch.cuda.CUDAGraph:
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    return graph


def timed(graphs: list) -> list[float]:
    times = [[] for _ in graphs]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(REPLAYS):
        for i, graph in enumerate(graphs):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1e3 / CALLS)
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", type=int, default=12)
    parser.add_argument("--rows", default="1024,1576,3000,16384")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--rounds", type=int, default=1, help="time the candidates this many times over")
    parser.add_argument("--widths", default="d768", help=f"some of {', '.join(SHAPES)}")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    print(torch.cuda.get_device_name(), torch.__version__, args.dtype, flush=True)
    lib = lt._library()
    device = torch.cuda.current_device()
    handle = lt._handle(lib, device)
    shapes = [(f"{w}:{label}", n_k) for w in args.widths.split(",") for label, n_k in SHAPES[w].items()]
    for m in map(int, args.rows.split(",")):
        for label, (n, k) in shapes:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(n, k, device="cuda", dtype=dtype) / k ** 0.5
            bias = torch.randn(n, device="cuda", dtype=dtype)
            out = torch.empty(m, n, device="cuda", dtype=dtype)
            mat2 = w.t()
            key = (lt._DTYPES[dtype], lt._operand(mat2), lt._operand(x), (n, m, out.stride(0)), bias.data_ptr())
            desc, (a, b, d), results = offered(lib, handle, key, args.algos)
            one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
            reference = torch.addmm(bias, x, mat2)

            def call(algo):
                stream = torch.cuda.current_stream().cuda_stream
                lt._check(lib.cublasLtMatmul(handle, desc, ctypes.byref(one), ctypes.c_void_p(mat2.data_ptr()), a,
                                             ctypes.c_void_p(x.data_ptr()), b, ctypes.byref(zero),
                                             ctypes.c_void_p(out.data_ptr()), d, ctypes.c_void_p(out.data_ptr()), d,
                                             ctypes.byref(algo), None, 0, ctypes.c_void_p(stream)), "matmul")
            graphs = [graph_of(lambda: torch.addmm(bias, x, mat2, out=out))]
            for result in results:
                graphs.append(graph_of(lambda algo=result.algo: call(algo)))
                error = ((out.float() - reference.float()).norm() / reference.float().norm()).item()
                assert error < 5e-3, f"{label} {m}: an algorithm's error {error:.1e}"
            for _ in range(args.rounds):
                report(lib, label, m, n, k, graphs, results)
            for layout in (a, b, d):
                lib.cublasLtMatrixLayoutDestroy(layout)
            lib.cublasLtMatmulDescDestroy(desc)


def report(lib, label: str, m: int, n: int, k: int, graphs: list, results: list) -> None:
    """One line: torch's time, the first candidate's, the best one's and every candidate's."""
    us = timed(graphs)
    flops = 2 * m * n * k
    cells = [f"#{i} {t:6.2f} us ({r.waves:4.2f} waves, {flops / t / 1e6:4.0f} TF/s, {config(lib, r.algo)})"
             for i, (t, r) in enumerate(zip(us[1:], results))]
    best = min(range(len(results)), key=lambda i: us[1 + i])
    print(f"{m:6} x {label:12} torch {us[0]:6.2f} | first {us[1]:6.2f} best #{best} {us[1 + best]:6.2f} "
          f"({us[1] / us[1 + best]:.2f}x) | " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
