#!/usr/bin/env python3
"""Two model stems cuDNN runs poorly at full size, against the rewrites that would replace them.
fp16, CUDA graphs, medians (``fused_linear_bench.time_graph``), each rewrite checked against the
stem as written:

- Whisper-small's two 1-d convolutions (80 -> 768 channels over 3000 frames, k 3; 768 -> 768,
  stride 2) with GELU, ending token-major ([batch, 1500, 768]): ``F.conv1d`` as written (cuDNN
  moves x, W and the output between NCHW and NHWC on every call), against im2col and a matmul
  (the frames' windows gathered into [batch * frames, channels * 3] rows, one GEMM each), both
  under torch.compile (Inductor fuses the gathers and GELUs) and eager; and the package's rewrite
  (``trace/decompositions.window_convolution``: a window's rows ordered (tap, channel), W permuted
  to match, so that the gather reads whole rows), compiled.
- ResNet-50's 7 x 7 stem (3 -> 64 channels, batch 8, 224 x 224, channels last), its 3 channels
  as they are (cuDNN pads them on every call) against padded to 4 and to 8 with zero weights.

    python3 benchmarks/stem_probe.py [--kernels]

``--kernels``: also the GPU kernels of one call of each (torch profiler: names and microseconds).
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_linear_bench import time_graph  # noqa: E402  CUDA-graph replays, median us a call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aotcombo.builder.trace.decompositions import window_convolution  # noqa: E402


def whisper_conv(x, w1, b1, w2, b2):
    h = F.gelu(F.conv1d(x, w1, b1, padding=1))
    return F.gelu(F.conv1d(h, w2, b2, stride=2, padding=1)).permute(0, 2, 1)


def whisper_gemm(x, w1, b1, w2, b2):
    batch, channels, frames = x.shape
    cols = F.pad(x, (1, 1)).unfold(2, 3, 1).permute(0, 2, 1, 3).reshape(batch * frames, channels * 3)
    h = F.gelu(torch.addmm(b1, cols, w1.reshape(w1.shape[0], -1).t())).view(batch, frames, -1)
    cols = F.pad(h, (0, 0, 1, 1)).unfold(1, 3, 2).reshape(-1, h.shape[-1] * 3)  # [b * 1500, 768 * 3]
    out = F.gelu(torch.addmm(b2, cols, w2.reshape(w2.shape[0], -1).t()))
    return out.view(batch, -1, w2.shape[0])


def whisper_windows(x, w1, b1, w2, b2):
    """The package's rewrite (``trace/decompositions.window_convolution``): windows as (tap,
    channel) rows, W permuted to match."""
    h = F.gelu(window_convolution(x, w1, b1, 1, 1))
    return F.gelu(window_convolution(h, w2, b2, 2, 1)).permute(0, 2, 1)


def resnet_stem(x, w):
    return F.conv2d(x, w, None, 2, 3)


def padded(x, w, channels):
    extra = channels - x.shape[1]
    xp = F.pad(x, (0, 0, 0, 0, 0, extra)).contiguous(memory_format=torch.channels_last)
    wp = F.pad(w, (0, 0, 0, 0, 0, extra)).contiguous(memory_format=torch.channels_last)
    return xp, wp


def kernels(fn, args) -> str:
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    rows = [(e.name, e.device_time_total) for e in prof.events()
            if e.device_type.name == "CUDA" and e.device_time_total > 0]
    return "; ".join(f"{name[:60]} {us:.1f}" for name, us in rows)


def rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernels", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    dev, half = "cuda", torch.float16
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")

    x = torch.randn(2, 80, 3000, device=dev, dtype=half)
    w1, b1 = torch.randn(768, 80, 3, device=dev, dtype=half) / 15, torch.randn(768, device=dev, dtype=half) / 10
    w2, b2 = torch.randn(768, 768, 3, device=dev, dtype=half) / 48, torch.randn(768, device=dev, dtype=half) / 10
    wargs = [(x, w1, b1, w2, b2)] + [(torch.randn_like(x), w1, b1, w2, b2) for _ in range(3)]
    want = whisper_conv(*[t.float() for t in wargs[0]])
    variants = {"conv eager": whisper_conv, "conv compiled": torch.compile(whisper_conv),
                "gemm eager": whisper_gemm, "gemm compiled": torch.compile(whisper_gemm),
                "windows compiled": torch.compile(whisper_windows)}
    for name, fn in variants.items():
        err = rel(fn(*wargs[0]), want)
        us = time_graph(lambda t, fn=fn: fn(*t), wargs)
        print(f"whisper stem {name:14} {us:8.2f} us  error {err:.1e}", flush=True)
        if args.kernels:
            print("   ", kernels(fn, wargs[0]))

    xs = [torch.randn(8, 3, 224, 224, device=dev, dtype=half).contiguous(memory_format=torch.channels_last)
          for _ in range(4)]
    w = (torch.randn(64, 3, 7, 7, device=dev, dtype=half) / 12).contiguous(memory_format=torch.channels_last)
    want = resnet_stem(xs[0].float(), w.float())
    for channels in (3, 4, 8):
        sets = [(x_, w) for x_ in xs] if channels == 3 else [padded(x_, w, channels) for x_ in xs]
        err = rel(resnet_stem(*sets[0]), want)
        us = time_graph(lambda t: resnet_stem(*t), sets)
        print(f"resnet stem {channels} channels {us:8.2f} us  error {err:.1e}", flush=True)
        if args.kernels:
            print("   ", kernels(resnet_stem, sets[0]))
        if channels != 3:
            pad_us = time_graph(lambda t, c=channels: padded(t[0], w, c), [(x_,) for x_ in xs])
            print(f"resnet stem {channels} channels: the input padded (eager) {pad_us:8.2f} us", flush=True)


if __name__ == "__main__":
    main()
