#!/usr/bin/env python3
"""cuBLASLt's bias + GELU (tanh form) epilogue (``torch._addmm_activation``, what
``kernels/linear/activation_epilogue.py`` gives a large linear) against addmm then GELU as two
kernels, at GPT-2 small's and a Llama 1B-sized FFN-up, in CUDA graphs, medians; and each one's
error against float64. On a machine with a GPU:

    python3 benchmarks/addmm_activation_probe.py
"""
import torch

from fused_linear_bench import time_graph  # CUDA-graph replays, median us a call


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    for dtype in (torch.bfloat16, torch.float16):
        for m, k, n in ((1024, 768, 3072), (4096, 768, 3072), (16384, 768, 3072), (1024, 2048, 8192)):
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            w = torch.randn(k, n, device="cuda", dtype=dtype) / k ** 0.5
            b = torch.randn(n, device="cuda", dtype=dtype)
            exact = torch.nn.functional.gelu(torch.addmm(b.double(), x.double(), w.double()), approximate="tanh")
            two = torch.nn.functional.gelu(torch.addmm(b, x, w), approximate="tanh")
            one = torch._addmm_activation(b, x, w, use_gelu=True)
            err = lambda t: ((t.double() - exact).norm() / exact.norm()).item()  # noqa: E731
            t_two = time_graph(lambda t: torch.nn.functional.gelu(torch.addmm(*t), approximate="tanh"), [(b, x, w)])
            t_one = time_graph(lambda t: torch._addmm_activation(*t, use_gelu=True), [(b, x, w)])
            t_mm = time_graph(lambda t: torch.addmm(*t), [(b, x, w)])
            print(f"{str(dtype)[6:]:9} {m:6}x{k}x{n}: addmm {t_mm:7.2f} us, addmm+gelu {t_two:7.2f}, "
                  f"_addmm_activation {t_one:7.2f} ({t_two / t_one:.2f}x); rel err {err(two):.2e} / {err(one):.2e}")


if __name__ == "__main__":
    main()
