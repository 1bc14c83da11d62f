#!/usr/bin/env python3
"""ResNet-50's BatchNorm folded into its convolutions and bias + ReLU (+ the residual) in cuDNN's
epilogue (``torch.cudnn_convolution_relu`` / ``cudnn_convolution_add_relu``), against the
convolution then a BatchNorm + ReLU kernel. The whole network (sample_models/full_size/resnet50.py,
batch 8, fp16, channels last), in CUDA graphs, medians: eager, the folded network with cuDNN's
convolution and torch's bias / ReLU ops, the folded network through the fused cuDNN ops, and the
package ``full_resnet50`` where installed. Each one's error against float32 eager. ``--kernels``:
instead, the GPU kernels one call makes, fused and not, at each distinct convolution of the
network and at sample_models/conv_block.py's (torch profiler, names and microseconds). On a machine
with a GPU:

    python3 benchmarks/conv_epilogue_probe.py [--kernels]
"""
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fused_linear_bench import time_graph  # noqa: E402  CUDA-graph replays, median us a call

from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402


def folded(conv, bn):
    """(W', b') of conv then bn in eval: W' = W * g / sqrt(v + eps), b' = beta - mean * g / sqrt(v + eps)."""
    scale = bn.weight.float() * torch.rsqrt(bn.running_var.float() + bn.eps)
    w = (conv.weight.float() * scale.view(-1, 1, 1, 1)).to(conv.weight.dtype)
    b = bn.bias.float() - bn.running_mean.float() * scale
    if conv.bias is not None:
        b = b + conv.bias.float() * scale
    return w.contiguous(memory_format=torch.channels_last), b.to(conv.weight.dtype)


def plan(model):
    """The network as a list of folded steps."""
    steps = [("conv_relu", *folded(model.conv1, model.bn1), model.conv1), ("maxpool",)]
    for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in layer:
            w1, b1 = folded(block.conv1, block.bn1)
            w2, b2 = folded(block.conv2, block.bn2)
            w3, b3 = folded(block.conv3, block.bn3)
            down = None
            if block.downsample is not None:
                wd, bd = folded(block.downsample[0], block.downsample[1])
                down = (wd, block.downsample[0])
                b3 = b3 + bd
            steps.append(("block", (w1, b1, block.conv1), (w2, b2, block.conv2), (w3, b3, block.conv3), down))
    steps.append(("head", model.fc.weight, model.fc.bias))
    return steps


def _args(conv):
    return list(conv.stride), list(conv.padding), list(conv.dilation), conv.groups


def run(steps, x, fused: bool):
    def conv_relu(x, w, b, conv):
        if fused:
            return torch.cudnn_convolution_relu(x, w, b, *_args(conv))
        return F.relu(F.conv2d(x, w, b, conv.stride, conv.padding, conv.dilation, conv.groups))

    def conv_add_relu(x, w, z, b, conv):
        if fused:
            return torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, *_args(conv))
        return F.relu(F.conv2d(x, w, b, conv.stride, conv.padding, conv.dilation, conv.groups) + z)

    for step in steps:
        if step[0] == "conv_relu":
            x = conv_relu(x, *step[1:])
        elif step[0] == "maxpool":
            x = F.max_pool2d(x, 3, 2, 1)
        elif step[0] == "block":
            (w1, b1, c1), (w2, b2, c2), (w3, b3, c3), down = step[1:]
            z = x if down is None else F.conv2d(x, down[0], None, down[1].stride, down[1].padding)
            y = conv_relu(x, w1, b1, c1)
            y = conv_relu(y, w2, b2, c2)
            x = conv_add_relu(y, w3, z, b3, c3)
        else:
            x = F.linear(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1), step[1], step[2])
    return x


def kernels(steps, x):
    """The GPU kernels of one call at each distinct convolution, fused and not."""
    from torch.profiler import ProfilerActivity, profile

    seen, cases = set(), []

    def record(x, w, b, conv, z=None):
        key = (tuple(x.shape), tuple(w.shape), conv.stride, z is not None)
        if key not in seen:
            seen.add(key)
            cases.append((x, w, b, conv, z))

    for step in steps:
        if step[0] == "conv_relu":
            record(x, *step[1:])
            x = run([step], x, fused=True)
        elif step[0] == "block":
            (w1, b1, c1), (w2, b2, c2), (w3, b3, c3), down = step[1:]
            record(x, w1, b1, c1)
            y = run([("conv_relu", w1, b1, c1)], x, fused=True)
            record(y, w2, b2, c2)
            y = run([("conv_relu", w2, b2, c2)], y, fused=True)
            z = x if down is None else F.conv2d(x, down[0], None, down[1].stride, down[1].padding)
            record(y, w3, b3, c3, z)
            x = run([step], x, fused=True)
        elif step[0] == "maxpool":
            x = F.max_pool2d(x, 3, 2, 1)
    g = torch.Generator().manual_seed(0)
    block = torch.randn(8, 64, 56, 56, generator=g).half().cuda().contiguous(memory_format=torch.channels_last)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False)
    w = torch.randn(64, 64, 3, 3, generator=g).half().cuda().contiguous(memory_format=torch.channels_last)
    cases.append((block, w, torch.randn(64, generator=g).half().cuda(), conv, None))  # conv_block.py's
    for x, w, b, conv, z in cases:
        fused = ((lambda: torch.cudnn_convolution_relu(x, w, b, *_args(conv))) if z is None else
                 (lambda: torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, *_args(conv))))
        bare = lambda: F.conv2d(x, w, None, conv.stride, conv.padding)  # noqa: E731
        line = f"x {list(x.shape)} w {list(w.shape)} stride {conv.stride} {'+ residual' if z is not None else ''}"
        for name, fn in (("fused", fused), ("conv alone", bare)):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            events = [e for e in prof.events() if e.device_type.name == "CUDA"]
            line += f"\n  {name:10}: " + "; ".join(f"{e.name[:60]} {e.device_time:.1f} us" for e in events)
        print(line)


def main():
    if "--kernels" in sys.argv:
        source = model_file("resnet50", FULL_SIZE_DIR)
        with torch.no_grad():
            steps = plan(source.get_model(device="cuda"))
            x = source.get_example_inputs()[0].cuda().contiguous(memory_format=torch.channels_last)
            kernels(steps, x)
        return
    print(torch.cuda.get_device_name(), torch.__version__, "cudnn", torch.backends.cudnn.version())
    source = model_file("resnet50", FULL_SIZE_DIR)
    eager = source.get_model(device="cuda")
    model32 = source.get_model(dtype=torch.float32, device="cuda")
    eager_cl = source.get_model(device="cuda").to(memory_format=torch.channels_last)
    sets = [tuple(t.cuda() for t in source.get_example_inputs(seed=s)) for s in (1, 2, 3)]
    sets_cl = [(x.contiguous(memory_format=torch.channels_last),) for (x,) in sets]
    with torch.no_grad():
        steps = plan(eager)
        ref = model32(sets[0][0].float())
        err = lambda y: float((y.float() - ref).norm() / ref.norm())  # noqa: E731
        t0 = time.perf_counter()
        run(steps, sets_cl[0][0], fused=True)
        torch.cuda.synchronize()
        print(f"fused: first call {1e3 * (time.perf_counter() - t0):.0f} ms")
        t0 = time.perf_counter()
        run(steps, sets_cl[0][0], fused=True)
        torch.cuda.synchronize()
        print(f"fused: second call {1e3 * (time.perf_counter() - t0):.1f} ms")
        rows = {"eager (channels first)": (lambda t: eager(*t), sets),
                "eager (channels last)": (lambda t: eager_cl(*t), sets_cl),
                "folded, torch ops": (lambda t: run(steps, t[0], fused=False), sets_cl),
                "folded, cudnn fused": (lambda t: run(steps, t[0], fused=True), sets_cl)}
        try:
            import full_resnet50

            ours = full_resnet50.load("cuda", weights=eager.state_dict())
            rows["ours (full_resnet50)"] = (lambda t: ours(*t), sets)
        except ImportError:
            pass
        for name, (fn, s) in rows.items():
            out = fn(s[0])
            us = time_graph(fn, s) if not name.startswith("ours") else _time_package(fn, s)
            print(f"{name:24} {us / 1e3:7.3f} ms  rel err vs fp32 {err(out):.2e}")


def _time_package(fn, sets) -> float:
    """The package replays its own graph: time calls back to back with events."""
    import statistics

    for _ in range(10):
        fn(sets[0])
    torch.cuda.synchronize()
    times = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(20):
            fn(sets[i % len(sets)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / 20)
    return statistics.median(times)


if __name__ == "__main__":
    main()
