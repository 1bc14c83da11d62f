#!/usr/bin/env python3
"""The zoo and the samples on one GPU, one run: eager, torch.compile(mode="reduce-overhead")
and the package's default call and serving path, side by side, per model.

    PYTHONPATH=<site with the wheels>:. PYTHONUNBUFFERED=1 \\
        python3 benchmarks/zoo_bench.py [MODEL ...] --out $OUT

MODEL: a zoo model (sample_models/zoo/), ``MODEL@BATCH`` for one at another batch size (its
package ``zoo_MODEL_bBATCH``, built by ``scripts/build_zoo.py MODEL@BATCH``), a sample
(branches, transformer_block, adam_step, conv_block), or ``full/MODEL``, a full-size model
(sample_models/full_size/, package ``full_MODEL`` built with ``--weights external``: both sides
take the weights of the file's model made here). Per model, all in this process, on the file's
example inputs drawn with fresh
seeds:
- ``eager``: the file's model with the package's weights, under ``torch.no_grad()``;
- ``ours_default``: ``pkg.load("cuda")`` called with the caller's tensors (graph mode: copied
  in, replayed, outputs copied out): what ``y = m(x)`` costs;
- ``ours_static``: the serving path, ``m(*m.static_inputs())`` with ``copy_outputs=False``;
- ``compile_ro``: ``torch.compile(mode="reduce-overhead")`` (its compile kept out of the timing,
  measured last per model: its CUDA graph trees must not record while ours are live); with
  ``--max-autotune``, ``compile_ma``: ``torch.compile(mode="max-autotune")`` after it.
Each is timed as synchronized wall clock per call (median of ``--calls``), the input sets
rotating; ours default and static call by call in turn (A B A B ...: on the H100 a run of
200 calls of one ran up to 1.5-3x slower now and then, so timed one after the other they
could differ by that much). Writes one JSON line per model to ``$OUT/zoo_bench.jsonl`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import SAMPLES, fresh_like, import_package  # noqa: E402
from aotcombo.testing.timing import time_synced, time_synced_interleaved, warm_up  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, ZOO, eager_model, fresh_inputs, model_file, package_name  # noqa: E402

SEEDS = (301, 302, 303, 304)


def measure(fn, sets, calls: int) -> float:
    device = torch.device("cuda")
    warm_up(fn, sets, device, calls=5, seconds=0.2)
    return time_synced(fn, sets, device, calls)["median"]


def measure_interleaved(fns: list, sets_per_fn: list, calls: int) -> list[float]:
    """The median ms per call of each of ``fns``, timed call by call in turn."""
    device = torch.device("cuda")
    for fn, sets in zip(fns, sets_per_fn):
        warm_up(fn, sets, device, calls=5, seconds=0.2)
    return [s["median"] for s in time_synced_interleaved(fns, sets_per_fn, device, calls)]


def sample(name: str) -> tuple:
    """A sample's eager model on the GPU and input sets drawn with fresh seeds."""
    from aotcombo.builder.inputs.modelfile import load_model_file

    model, example = load_model_file(HERE.parent / "sample_models" / f"{name}.py")
    sets = []
    for seed in SEEDS:
        generator = torch.Generator(device="cuda").manual_seed(seed)
        sets.append([fresh_like(t.cuda(), generator) for t in example])
    return model.cuda(), sets


def resolve(name: str) -> tuple:
    """A model named on the command line: its package, input sets (one per seed), eager model
    and the weights its loads take (None: the package's own)."""
    if name in SAMPLES:
        eager, sets = sample(name)
        return import_package(name), sets, eager, None
    if name.startswith("full/"):
        source = model_file(name.removeprefix("full/"), FULL_SIZE_DIR)
        eager = source.get_model(device="cuda")
        sets = [tuple(t.cuda() for t in source.get_example_inputs(seed=seed)) for seed in SEEDS]
        return import_package("full_" + name.removeprefix("full/")), sets, eager, eager.state_dict()
    package = import_package(package_name(name))  # MODEL@BATCH: package zoo_MODEL_bBATCH
    return package, [fresh_inputs(name, seed) for seed in SEEDS], eager_model(name, package), None


def bench_model(name: str, calls: int, modes: tuple[str, ...]) -> dict:
    row: dict = {"model": name}
    package, sets, eager, weights = resolve(name)
    with torch.no_grad():
        row["eager_ms"] = measure(eager, sets, calls)
        m = package.load("cuda", weights=weights)
        static = package.load("cuda", copy_outputs=False, weights=weights)
        inputs = static.static_inputs()
        for dst, src in zip(inputs, sets[0]):
            dst.copy_(src)
        row["ours_default_ms"], row["ours_static_ms"] = measure_interleaved([m, static], [sets, [inputs]], calls)
        del m, static
        for mode in modes:
            row.update(compiled_row(eager, sets, calls, mode))
    return row


MODE_KEYS = {"reduce-overhead": "compile_ro", "max-autotune": "compile_ma"}


def compiled_row(eager, sets, calls: int, mode: str) -> dict:
    """``torch.compile(eager, mode=mode)``: its compile (with the first calls) in s and its median
    ms, under keys named for the mode (``compile_ro_ms``, ``compile_ma_ms``), or its error."""
    key, start = MODE_KEYS[mode], time.perf_counter()
    compiled = torch.compile(eager, mode=mode)
    row = {}
    try:
        for _ in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            compiled(*sets[0])
        torch.cuda.synchronize()
        row["compile_s" if mode == "reduce-overhead" else f"{key}_s"] = round(time.perf_counter() - start, 1)

        def run(*x):
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*x)

        row[f"{key}_ms"] = measure(run, sets, calls)
    except Exception as exc:  # noqa: BLE001 - reported, the run goes on
        row[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    torch._dynamo.reset()
    return row


def run_models(models: list[str], measure, path: Path) -> list[dict]:
    """``measure(model)`` for each model, in order: each row printed and appended to ``path``
    (JSON lines); a model that fails is a row with its error, and the run goes on."""
    rows = []
    for name in models:
        try:
            row = measure(name)
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            traceback.print_exc()
            row = {"model": name, "error": f"{type(exc).__name__}: {str(exc)[-600:]}"}
        row.update(device=torch.cuda.get_device_name(), torch=torch.__version__)  # performance_doc.py reads them
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(ZOO))
    parser.add_argument("--out", default=str(HERE.parent / "out"), help="for zoo_bench.jsonl (default %(default)s)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile at all")
    parser.add_argument("--max-autotune", action="store_true",
                        help='also torch.compile(mode="max-autotune") (its CUDA graphs too), after reduce-overhead')
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    modes = () if args.no_compile else ("reduce-overhead",) + (("max-autotune",) if args.max_autotune else ())
    rows = run_models(args.models, lambda name: bench_model(name, args.calls, modes),
                      Path(args.out) / "zoo_bench.jsonl")
    print(f"\n{'model':20} {'eager':>8} {'RO':>8} {'MA':>8} {'default':>8} {'static':>8}  RO/default RO/static "
          "default/static MA/default  (ms, medians; MA: max-autotune)")
    for r in rows:
        f = lambda k: f"{r[k]:8.3f}" if k in r else f"{'-':>8}"  # noqa: E731
        ro = r.get("compile_ro_ms")
        ratio = (f"{ro / r['ours_default_ms']:10.2f} {ro / r['ours_static_ms']:9.2f}" if ro and "ours_static_ms" in r
                 else f"{'':20}")
        if "ours_static_ms" in r:
            ratio += f" {r['ours_default_ms'] / r['ours_static_ms']:14.2f}"
            ratio += f" {r['compile_ma_ms'] / r['ours_default_ms']:10.2f}" if "compile_ma_ms" in r else ""
        print(f"{r['model']:20} {f('eager_ms')} {f('compile_ro_ms')} {f('compile_ma_ms')} {f('ours_default_ms')} "
              f"{f('ours_static_ms')}  {ratio}")


if __name__ == "__main__":
    main()
