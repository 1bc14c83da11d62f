#!/usr/bin/env python3
"""Our Triton flash-attention forward (non-causal) against torch's SDPA backends on one GPU: BERT-base (12 heads
of 64, fp16, an additive key-padding mask, batches after the first padded by half; ``-skip`` configs read only the
key blocks a batch's row may see) at (batch, seq) = (1,128) (8,128) (8,383) (16,256) (32,512); ViT-B/16 (8 x 12
heads x 197, d 64); Whisper-small's encoder (2 x 12 heads x 1500, d 64); SD 1.5's UNet (2 x 8 x 4096, d 40;
2 x 8 x 1024, d 80). q, k, v: views of a [batch, seq, 3, heads, d] tensor (``packed``, as a fused QKV linear
writes) or contiguous [batch, heads, seq, d] (``bhsd``); ours writes [batch, seq, heads, d], as the next linear reads.

    python3 benchmarks/prefill_attention_bench.py --out $OUT
    TRITON_INTERPRET=1 python3 benchmarks/prefill_attention_bench.py --check     # CPU, tiny shapes

Per shape and layout: max abs error against SDPA in fp32 math on the same inputs (tolerance 2e-3: fp16 outputs of
unit-scale random inputs) of torch's backends and of ours with each config of ``CONFIGS`` (one that fails to
compile, runs out of shared memory or errs is noted and skipped; the fastest correct one is kept); then median us of
cuDNN, flash (no mask only), memory-efficient and ours: CUDA events around each call, >= 200 calls after a warm-up,
backends in turn call by call, the same inputs each call; ``us``: each call queued behind a sleep kernel (the GPU's
time alone), ``us_eager``: the host's launch counted too. TFLOP/s = 4 * batch * heads * seq^2 * d / us. Last, every
config in fp16 and bf16 with a batch's keys all masked. Writes ``$OUT/prefill_attention.jsonl`` (a line per shape and
layout, as soon as measured) and a table. ``--check``: the kernel under Triton's interpreter against the reference at
tiny shapes; exit status 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # aotcombo.testing from this checkout

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from aotcombo.testing.timing import gpu_us  # noqa: E402

from prefill_attention_kernel import CONFIGS, MASKED_AT, TileConfig, attention  # noqa: E402

TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
SLEEP_CYCLES = 300_000  # ~0.15 ms of torch.cuda._sleep: longer than any one call's launch on the host


def reference(q, k, v, key_mask=None):
    """SDPA in fp32 math on the same values. Mask values at or below MASKED_AT (-inf aside) become fp32's
    finfo.min: a row of only such keys averages them uniformly, as torch does at the mask's own precision."""
    bias = None
    if key_mask is not None:
        m = key_mask.float()
        bias = torch.where((m <= MASKED_AT.value) & m.isfinite(), torch.finfo(torch.float32).min, m)[:, None, None, :]
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bias)


def operands(batch, heads, seq, head_dim, dtype, device, layout, kept_first=None, fill=None):
    """q, k, v ([batch, heads, seq, d] views by ``layout``) and the key mask: None when ``fill`` is None, else
    [batch, seq] with ``fill`` past the first ``kept_first`` keys of batch 0 and past seq // 2 of the others."""
    if layout == "packed":
        q, k, v = torch.randn(batch, seq, 3, heads, head_dim, dtype=dtype, device=device).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    else:
        q, k, v = (torch.randn(batch, heads, seq, head_dim, dtype=dtype, device=device) for _ in range(3))
    if layout == "misaligned":  # one element past 16 bytes: the kernel gets strides in elements (STRIDE_UNIT 1)
        q, k, v = (torch.empty(t.numel() + 1, dtype=dtype, device=device)[1:].view(t.shape).copy_(t) for t in (q, k, v))
    if fill is None:
        return q, k, v, None
    mask = torch.zeros(batch, seq, dtype=dtype, device=device)
    mask[0, kept_first:] = fill
    mask[1:, seq // 2:] = fill
    return q, k, v, mask


def output(q, layout: str):
    """An empty [batch, seq, heads, d] (``bshd``) or [batch, heads, seq, d] tensor, as [batch, heads, seq, d]."""
    batch, heads, seq, head_dim = q.shape
    return q.new_empty(batch, seq, heads, head_dim).transpose(1, 2) if layout == "bshd" else q.new_empty(q.shape)


def max_err(out, ref) -> float:
    return (out.float() - ref).abs().max().item()


def check() -> int:
    """Ours under the interpreter against ``reference`` (batch 0: every key masked); 1 on any mismatch."""
    torch.manual_seed(0)
    cases = [(seq, d, fill, layout, out_layout, config)
             for seq in (37, 64) for d in (64, 40) for fill in (None, torch.finfo(torch.float16).min)
             for layout in ("packed", "bhsd") for out_layout in ("bshd", "bhsd")
             for config in (TileConfig(32, 16, 4, 1), TileConfig(16, 32, 4, 1, True),
                            TileConfig(16, 16, 4, 1, skip=True), TileConfig(16, 16, 4, 1, skip=True, scan=32))]
    cases += [(seq, 80, float("-inf"), layout, "bshd", TileConfig(16, 16, 4, 1))
              for seq in (16, 37) for layout in ("packed", "misaligned")]
    failures = 0
    for seq, d, fill, layout, out_layout, config in cases:
        q, k, v, mask = operands(2, 2, seq, d, torch.float16, "cpu", layout, kept_first=0, fill=fill)
        err = max_err(attention(q, k, v, output(q, out_layout), config, mask), reference(q, k, v, mask))
        ok = err <= TOLERANCE[torch.float16]  # NaN fails too
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} seq {seq:3d} d {d:3d} mask {fill!s:9s} {layout:6s} -> {out_layout} "
              f"{config.name:16s} max abs err {err:.2e}")
    print(f"{len(cases) - failures}/{len(cases)} cases within {TOLERANCE[torch.float16]:g} of fp32 math (fp16; bf16 is "
          "checked on the GPU: the interpreter's tl.dot mishandles it)")
    return 1 if failures else 0


Shape = NamedTuple("Shape", [("model", str), ("batch", int), ("heads", int), ("seq", int), ("head_dim", int),
                             ("masked", bool)])
SHAPES = (*(Shape("bert-base", b, 12, s, 64, True) for b, s in ((1, 128), (8, 128), (8, 383), (16, 256), (32, 512))),
          Shape("vit-b16", 8, 12, 197, 64, False), Shape("whisper-small-enc", 2, 12, 1500, 64, False),
          Shape("sd15-unet", 2, 8, 4096, 40, False),
          Shape("sd15-unet", 2, 8, 1024, 80, False))
TORCH_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                  "efficient": SDPBackend.EFFICIENT_ATTENTION}


def torch_sdpa(backend, q, k, v, mask):
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def median_us(fns: dict, calls: int, queued: bool = True) -> dict:
    """Median us per call of each of ``fns``, called in turn (CUDA events around each call: gpu_us); ``queued``:
    each call behind a sleep kernel, so that the host's launch is not timed."""
    samples = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():
            if queued:
                torch.cuda._sleep(SLEEP_CYCLES)
            samples[name].append(gpu_us(fn, 1))
    return {name: round(statistics.median(xs), 2) for name, xs in samples.items()}


def note(error: Exception) -> str:
    return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"[:240]


def config_errors(q, k, v, mask, ref, out, configs) -> dict:
    """Ours' max abs error against ``ref`` per config, or why it did not run (compile error, out of shared memory,
    strides unfit for TMA)."""
    errors = {}
    for config in configs:
        try:
            out.fill_(float("nan"))
            attention(q, k, v, out, config, mask)
            torch.cuda.synchronize()
            errors[config] = max_err(out, ref)
        except Exception as e:
            errors[config] = note(e)
    return errors


def measure(shape: Shape, layout: str, calls: int) -> dict:
    dtype, tol = torch.float16, TOLERANCE[torch.float16]
    q, k, v, mask = operands(shape.batch, shape.heads, shape.seq, shape.head_dim, dtype, "cuda", layout,
                             kept_first=shape.seq, fill=torch.finfo(dtype).min if shape.masked else None)
    ref, out = reference(q, k, v, mask), output(q, "bshd")
    flop = 4 * shape.batch * shape.heads * shape.seq * shape.seq * shape.head_dim
    row = {**shape._asdict(), "layout": layout, "dtype": "float16", "tolerance": tol, "flop": flop, "errors": {}}
    fns = {}
    for name, backend in TORCH_BACKENDS.items():
        if name != "flash" or not shape.masked:
            fn = functools.partial(torch_sdpa, backend, q, k, v, None if mask is None else mask[:, None, None, :])
            try:
                row["errors"][name] = max_err(fn(), ref)
                fns[name] = fn
            except Exception as e:  # a backend that refuses the shape
                row["errors"][name] = note(e)
    row["configs"] = {}
    for config, err in config_errors(q, k, v, mask, ref, out, CONFIGS[triton.next_power_of_2(shape.head_dim)]).items():
        row["configs"][config.name] = {"err": err}
        if isinstance(err, float) and err <= tol:  # NaN is not
            fn = functools.partial(attention, q, k, v, out, config, mask)
            median_us({"warm-up": fn}, 5, queued=False)
            us = row["configs"][config.name]["us"] = median_us({"ours": fn}, 30)["ours"]
            if "ours" not in fns or us < row["configs"][row["ours_config"]]["us"]:
                fns["ours"], row["ours_config"], row["errors"]["ours"] = fn, config.name, err
    median_us(fns, 10, queued=False)  # warm-up
    row["us"], row["us_eager"] = median_us(fns, calls), median_us(fns, calls, queued=False)
    row["tflops"] = {name: round(flop / us / 1e6, 1) for name, us in row["us"].items()}
    if "ours" in fns and "cudnn" in fns:
        row["cudnn/ours"] = round(row["us"]["cudnn"] / row["us"]["ours"], 3)
    return row


def gpu_check(dtype) -> dict:
    """Every config at BERT's (8, 383) with every key of batch 0 masked: ``check`` on the GPU, and bf16."""
    q, k, v, mask = operands(8, 12, 383, 64, dtype, "cuda", "packed", kept_first=0, fill=torch.finfo(dtype).min)
    errors = config_errors(q, k, v, mask, reference(q, k, v, mask), output(q, "bshd"), CONFIGS[64])
    ran = [e for e in errors.values() if isinstance(e, float)]
    return {"check": str(dtype)[6:], "shape": "bert-base b8 s383, batch 0 all masked", "tolerance": TOLERANCE[dtype],
            "ok": bool(ran) and all(e <= TOLERANCE[dtype] for e in ran),
            "errors": {c.name: e for c, e in errors.items()}}


def fmt(x) -> str:
    return f"{x:.1e}" if isinstance(x, float) else str(x)


def print_row(row: dict) -> None:
    print(f"{row['model']} b{row['batch']} h{row['heads']} s{row['seq']} d{row['head_dim']} {row['layout']}"
          + (" mask" if row["masked"] else "") + (f": FAILED {row['error']}" if "error" in row else ""), flush=True)
    for name, err in row.get("errors", {}).items():
        print(f"    {name:10s} " + (f"{row['us'][name]:9.2f} us {row['tflops'][name]:6.1f} TFLOP/s  eager "
                                    f"{row['us_eager'][name]:9.2f} us  max abs err {fmt(err)}"
                                    if name in row["us"] else f"not run: {err}"))
    for name, entry in row.get("configs", {}).items():
        print(f"      {name:18s} {fmt(entry['err'])[:100]:10s} {entry.get('us', '')!s:>9}"
              + (" <- best" if name == row.get("ours_config") else ""), flush=True)


def emit(sink, row: dict) -> None:
    sink.write(json.dumps(row) + "\n")
    sink.flush()


def bench(out_dir: Path, layouts: list[str], calls: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", flush=True)
    rows = []
    with open(out_dir / "prefill_attention.jsonl", "w") as sink:
        for shape, layout in [(shape, layout) for shape in SHAPES for layout in layouts]:
            start = time.perf_counter()
            try:
                row = measure(shape, layout, calls)
            except Exception as e:  # one shape's failure keeps the others' results
                row = {**shape._asdict(), "layout": layout, "error": note(e)}
            row["seconds"] = round(time.perf_counter() - start, 1)
            emit(sink, row)
            print_row(row)
            rows.append(row)
        print("\nmodel              batch   seq   d layout  cudnn us   ours us  cudnn/ours  ours TFLOP/s  config")
        for r in rows:
            if "ours" in r.get("us", {}):
                print(f"{r['model']:18s} {r['batch']:5d} {r['seq']:5d} {r['head_dim']:3d} {r['layout']:6s} "
                      f"{r['us'].get('cudnn', float('nan')):9.2f} {r['us']['ours']:9.2f} "
                      f"{r.get('cudnn/ours', '-')!s:>11} {r['tflops']['ours']:13.1f}  {r['ours_config']}")
        for dtype in (torch.float16, torch.bfloat16):  # every config's errors are caught inside
            emit(sink, row := gpu_check(dtype))
            print(f"check {row['check']}, {row['shape']}: ok {row['ok']} "
                  + " ".join(f"{c} {fmt(e)[:60]}" for c, e in row["errors"].items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out")
    parser.add_argument("--check", action="store_true", help="interpreter check at tiny shapes (TRITON_INTERPRET=1)")
    parser.add_argument("--layouts", default="packed,bhsd", help="of packed, bhsd: the q/k/v layouts to time")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per backend, in each mode")
    args = parser.parse_args()
    if args.check:
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("--check runs under the interpreter: TRITON_INTERPRET=1")
        sys.exit(check())
    bench(Path(args.out), args.layouts.split(","), args.calls)


if __name__ == "__main__":
    main()
