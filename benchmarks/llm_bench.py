#!/usr/bin/env python3
"""Per-token decode latency of the LLM sample, side by side in one run: eager, torch.compile
(mode="reduce-overhead") in a gpt-fast style loop, and the llm_decode package (graph mode:
the default call, and the serving path on its static inputs), at batch 1 and 8.

    PYTHONPATH=<site with llm_prefill and llm_decode>:. PYTHONUNBUFFERED=1 \\
        python3 benchmarks/llm_bench.py --out $OUT

A decode step reads every weight but the embedding table (of which it gathers b rows) and
the cache positions its b sequences have written (up to their positions; eager and
reduce-overhead read the whole static cache, the package only those): those bytes over the
step's time are its bandwidth, set against a device-to-device copy's (read + write)
measured in the same run. Times: synchronized wall clock per step (the next step cannot
start before its token is known), median over --steps, after a warm-up; every sequence at
cache position ``POSITION`` (the middle of the cache), given per sequence ([b, 1]).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.llm import sample  # noqa: E402
from aotcombo.testing.timing import copy_bandwidth, time_synced, warm_up  # noqa: E402


POSITION = 1024


def step_bytes(s, model, batch: int) -> int:
    weights = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                  if not name.startswith("tok_embeddings"))
    embedding = batch * s.DIM * 2
    cache = s.LAYERS * 2 * batch * s.KV_HEADS * (POSITION + 1) * s.HEAD_DIM * 2
    return weights + embedding + cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(HERE.parent / "out"), help="for llm_bench.json (default %(default)s)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="print the package's GPU kernels per decode step at batch 1 (op by op) and stop")
    args = parser.parse_args()
    device = torch.device("cuda")
    s = sample()
    model = s.get_model()
    weights = model.state_dict()
    if args.profile:
        return profile(s, weights, device)
    eager = model.to(device)
    decode_pkg = import_package("llm_decode")
    copy = copy_bandwidth(device, 1 << 30, 25, 200)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device copy {copy['GBps']:.0f} GB/s", flush=True)
    rows = []
    ours = decode_pkg.load("cuda", weights=weights)
    ours_static = decode_pkg.load("cuda", weights=weights, copy_outputs=False)
    compiled = None
    for batch in (int(b) for b in args.batches.split(",")):
        g = torch.Generator().manual_seed(batch)
        sets = [(torch.randint(0, s.VOCAB, (batch, 1), generator=g).to(device),
                 torch.full((batch, 1), POSITION, device=device)) for _ in range(4)]
        row = {"batch": batch, "bytes": step_bytes(s, eager, batch)}
        with torch.no_grad():
            row["eager_ms"] = _time(eager, sets, args.steps)
            row["ours_default_ms"] = _time(ours, sets, args.steps)
            static = ours_static.static_inputs(batch)
            for dst, src in zip(static, sets[0]):
                dst.copy_(src)
            row["ours_static_ms"] = _time(ours_static, [static], args.steps)
            if not args.no_compile:
                if compiled is None:
                    compiled = torch.compile(eager, mode="reduce-overhead", fullgraph=True)
                try:
                    def step(tokens, pos):
                        torch.compiler.cudagraph_mark_step_begin()
                        return compiled(tokens, pos)

                    start = time.perf_counter()
                    for _ in range(3):
                        step(*sets[0])
                    torch.cuda.synchronize()
                    row["compile_s"] = round(time.perf_counter() - start, 1)
                    row["compile_ro_ms"] = _time(step, sets, args.steps)
                except Exception as exc:  # noqa: BLE001 - reported, the run goes on
                    row["compile_ro_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        for key in ("eager_ms", "compile_ro_ms", "ours_default_ms", "ours_static_ms"):
            if key in row:
                gbps = row["bytes"] / (row[key] * 1e-3) / 1e9
                row[key.replace("_ms", "_copy_fraction")] = round(gbps / copy["GBps"], 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    with open(Path(args.out) / "llm_bench.json", "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy": copy,
                   "rows": rows}, f, indent=1)
    print(f"\n{'batch':>5} {'MB/step':>8} {'eager':>8} {'RO':>8} {'default':>8} {'static':>8}  RO/static  "
          "static: % of copy bandwidth   (ms per token, medians)")
    for r in rows:
        f = lambda k: f"{r[k]:8.3f}" if k in r else f"{'-':>8}"  # noqa: E731
        ratio = f"{r['compile_ro_ms'] / r['ours_static_ms']:9.2f}" if "compile_ro_ms" in r else f"{'-':>9}"
        print(f"{r['batch']:5d} {r['bytes'] / 1e6:8.1f} {f('eager_ms')} {f('compile_ro_ms')} {f('ours_default_ms')} "
              f"{f('ours_static_ms')}  {ratio}  {100 * r['ours_static_copy_fraction']:.0f} %")


def profile(s, weights, device, steps: int = 20) -> None:
    """The GPU time of each kernel of a batch-1 decode step, op by op (the kernels a replay runs)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    model = import_package("llm_decode").load("cuda", weights=weights, graphs=False)
    tokens, pos = torch.randint(0, s.VOCAB, (1, 1), device=device), torch.tensor([[POSITION]], device=device)
    with torch.no_grad():
        for _ in range(5):
            model(tokens, pos)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                model(tokens, pos)
            torch.cuda.synchronize()
    rows = [(e.key, e.count // steps, e.device_time_total / steps) for e in prof.key_averages()
            if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[2])
    total = sum(r[2] for r in rows)
    print(f"batch 1, {steps} steps: {total:.1f} us of GPU kernels per step, {sum(r[1] for r in rows)} kernels")
    for key, count, us in rows[:30]:
        print(f"{us:8.1f} us {count:4d}x  {key[:110]}")


def _time(fn, sets, steps: int) -> float:
    device = torch.device("cuda")
    warm_up(fn, sets, device, calls=10, seconds=0.3)
    return time_synced(fn, sets, device, steps)["median"]


if __name__ == "__main__":
    main()
