#!/usr/bin/env python3
"""Does a post-norm block's residual add belong in cuBLASLt's epilogue? BERT-base's attention output and
FFN-down linears (k 768 and 3072 -> n 768) over 16384 and 4096 rows, fp16: the runtime's cuBLASLt call
(``runtime/cublaslt.py``: bias epilogue, no workspace, the rule's algorithm) then an add + layer norm
kernel (torch.compile's), as the package runs them, against the same call with the residual as cuBLASLt's
C (beta = 1) then a layer norm alone. CUDA graphs of 10 calls, medians of 60 replays; max abs error of
each against float32.

    python3 benchmarks/residual_epilogue_probe.py

H100, torch 2.11, 2026-12-06, us: 16384 x 768: GEMM 30.2, with C 40.9; add + norm 26.1, norm 17.4;
together 55.3 against 58.9. 16384 x 3072: 109.3 / 130.4, 27.2 / 17.8, 137.9 against 146.4. At 4096 rows
15.5 / 16.3 and 35.7 / 37.1. Reading C costs the GEMM more than the norm saves: not kept.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo from this checkout

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fused_linear_bench  # noqa: E402

from aotcombo.runtime import cublaslt as lt  # noqa: E402

CALLS, REPLAYS = 10, 60


def linear(x, w, bias, out, residual=None) -> None:
    """out = x @ w.T + bias (+ residual, as cuBLASLt's C with beta = 1), through the runtime's plan."""
    mat2, device = w.t(), torch.cuda.current_device()
    lib = lt._library()
    handle = lt._handle(lib, device)
    key = (lt._DTYPES[out.dtype], lt._operand(mat2), lt._operand(x), (w.shape[0], x.shape[0], out.stride(0)),
           bias.data_ptr())
    if (device, key) not in lt._plans:
        major = torch.cuda.get_device_capability(device)[0]
        lt._plans[(device, key)] = lt._plan(lib, handle, key, lt._preferences(major, x.shape[0]))
    desc, a_layout, b_layout, d_layout, found = lt._plans[(device, key)]
    one, beta = ctypes.c_float(1.0), ctypes.c_float(0.0 if residual is None else 1.0)
    c = out if residual is None else residual
    lt._check(lib.cublasLtMatmul(
        handle, desc, ctypes.byref(one), ctypes.c_void_p(mat2.data_ptr()), a_layout, ctypes.c_void_p(x.data_ptr()),
        b_layout, ctypes.byref(beta), ctypes.c_void_p(c.data_ptr()), d_layout, ctypes.c_void_p(out.data_ptr()),
        d_layout, ctypes.byref(found.algo), None, 0, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
        "cublasLtMatmul")


@torch.compile(dynamic=False)
def add_norm(y, residual, weight, bias):
    return F.layer_norm(y + residual, (y.shape[-1],), weight, bias, 1e-12)


@torch.compile(dynamic=False)
def norm(y, weight, bias):
    return F.layer_norm(y, (y.shape[-1],), weight, bias, 1e-12)


def time_graph(step) -> float:
    """Median us per call of ``step()``: fused_linear_bench's CUDA-graph timer, 10 calls a replay."""
    return fused_linear_bench.time_graph(lambda _: step(), [None], CALLS, REPLAYS)


def main() -> None:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    lt.prepare(torch.device("cuda"))
    torch.manual_seed(0)
    for m in (16384, 4096):
        for k in (768, 3072):
            n = 768
            x = torch.randn(m, k, device="cuda", dtype=torch.half)
            w = (torch.randn(n, k, device="cuda") / k ** 0.5).half()
            bias, residual = torch.randn(n, device="cuda").half(), torch.randn(m, n, device="cuda").half()
            gamma, beta = torch.rand(n, device="cuda").half() + 0.5, torch.randn(n, device="cuda").half()
            y, y_c = (torch.empty(m, n, device="cuda", dtype=torch.half) for _ in range(2))
            ref = F.layer_norm(x.float() @ w.float().T + bias.float() + residual.float(), (n,), gamma.float(),
                               beta.float(), 1e-12)
            linear(x, w, bias, y)
            linear(x, w, bias, y_c, residual)
            errors = [(z.float() - ref).abs().max().item() for z in (add_norm(y, residual, gamma, beta),
                                                                     norm(y_c, gamma, beta))]
            timed = {"GEMM": time_graph(lambda: linear(x, w, bias, y)),
                     "GEMM with C": time_graph(lambda: linear(x, w, bias, y_c, residual)),
                     "add + norm": time_graph(lambda: add_norm(y, residual, gamma, beta)),
                     "norm": time_graph(lambda: norm(y_c, gamma, beta)),
                     "as built": time_graph(lambda: (linear(x, w, bias, y), add_norm(y, residual, gamma, beta))),
                     "residual in C": time_graph(lambda: (linear(x, w, bias, y_c, residual), norm(y_c, gamma, beta)))}
            print(f"{m} x {k} -> {n}, us: " + "  ".join(f"{a} {v:.1f}" for a, v in timed.items())
                  + f"  | max abs error as built {errors[0]:.2e}, residual in C {errors[1]:.2e}", flush=True)


if __name__ == "__main__":
    main()
