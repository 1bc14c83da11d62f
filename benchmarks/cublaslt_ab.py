#!/usr/bin/env python3
"""The runtime's cuBLASLt path (``runtime/cublaslt.py``) under other settings, A/B in one process:
the same package loaded once under each (its CUDA graphs captured under it: the path is taken only
in a capture, its plans made then), the loads timed call by call in turn, median ms a call.
``--compare rows``: ``MIN_ROWS`` 1024, 4096 and the path never taken (torch's call); ``--compare
rule``: the algorithm by ``PREFERRED`` (as built), the heuristic's first, and torch's call; ``--compare
second``: ``PREFERRED`` as built against its first preference alone.

    PYTHONPATH=<site with the wheels>:. python3 benchmarks/cublaslt_ab.py [--compare rule] bert_dyn full/sd_unet ...

``bert_dyn``: ``full_bert_base_dyn`` (``scripts/build_axes.py --no-exact``) at the shapes of
``axes_bench.py`` with 1024 tokens or more; other names as ``zoo_bench.py`` takes them (``full/MODEL``:
``full_MODEL`` built with ``--weights external``).
"""
import argparse
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the other benchmarks; aotcombo.testing from this checkout

import torch  # noqa: E402

from aotcombo.testing.gpu import import_package  # noqa: E402
from aotcombo.testing.timing import time_synced_interleaved, warm_up  # noqa: E402

NEVER = 1 << 40  # rows: the path never taken
COMPARE = {"rows": {"1024": {"MIN_ROWS": 1024}, "4096": {"MIN_ROWS": 4096}, "torch's": {"MIN_ROWS": NEVER}},
           "rule": {"rule": {}, "first": {"PREFERRED": {}}, "torch's": {"MIN_ROWS": NEVER}},
           # a setting given as a function: of the module's own value
           "second": {"both": {}, "first only": {"PREFERRED": lambda rules: {k: v[:1] for k, v in rules.items()}}}}


def loads(package, weights, sets_by_shape: list, variants: dict) -> dict:
    """The package loaded under each variant's settings, each shape's graph captured under them."""
    lt = importlib.import_module(package.__name__ + "._runtime.cublaslt")
    defaults, fns = {name: getattr(lt, name) for name in ("MIN_ROWS", "PREFERRED")}, {}
    for label, settings in variants.items():
        for name, value in {**defaults, **settings}.items():
            setattr(lt, name, value(defaults[name]) if callable(value) else value)
        lt._plans.clear()  # made again under these settings (graphs captured before keep theirs)
        fns[label] = package.load("cuda", weights=weights)
        for sets in sets_by_shape:
            warm_up(fns[label], sets, torch.device("cuda"), calls=5, seconds=0.2)
    for name, value in defaults.items():
        setattr(lt, name, value)
    return fns


def report(label: str, fns: dict, sets, calls: int = 200) -> None:
    stats = time_synced_interleaved(list(fns.values()), [sets] * len(fns), torch.device("cuda"), calls)
    print(f"{label:>24}: " + "  ".join(f"{k} {s['median']:.4f}" for k, s in zip(fns, stats)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+")
    parser.add_argument("--compare", choices=tuple(COMPARE), default="rule")
    args = parser.parse_args()
    variants = COMPARE[args.compare]
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    with torch.no_grad():
        for name in args.models:
            if name == "bert_dyn":
                from axes_bench import SHAPES, input_sets

                from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file
                weights = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda").state_dict()
                shapes = [(b, s) for b, s in SHAPES if b * s >= 1024]
                sets_by_shape = [input_sets(b, s) for b, s in shapes]
                fns = loads(import_package("full_bert_base_dyn"), weights, sets_by_shape, variants)
                cases = [(f"bert dyn {b}x{s}", sets) for (b, s), sets in zip(shapes, sets_by_shape)]
            else:
                from zoo_bench import resolve
                package, sets, _, weights = resolve(name)
                fns, cases = loads(package, weights, [sets], variants), [(name, sets)]
            for round_ in (1, 2):
                for label, sets in cases:
                    report(f"{label} r{round_}", fns, sets)
            del fns
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
