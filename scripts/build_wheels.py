"""Build every wheel the GPU check needs into .carry/wheels (no GPU needed here).

    .venv/bin/python scripts/build_wheels.py [--samples-only] [--out .carry/wheels]

The four sample models (sm_80, sm_90) and, unless --samples-only, one package
per construct of tests/coverage_models.py named cov_<construct> (sm_90).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from aotcombo.pipeline import build_package as build  # noqa: E402
from aotcombo.modelfile import load_model_file  # noqa: E402

SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / ".carry" / "wheels"))
    parser.add_argument("--samples-only", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    for name in SAMPLES:
        start = time.perf_counter()
        model, inputs = load_model_file(ROOT / "sample_models" / f"{name}.py")
        result = build(model, inputs, arch=["sm_80", "sm_90"], name=name, out=out)
        print(f"{result.wheel.name}: {time.perf_counter() - start:.1f} s", flush=True)
    if args.samples_only:
        return
    import coverage_models

    for name, factory in {**coverage_models.SUPPORTED, **coverage_models.RANDOM}.items():
        model, inputs = factory()
        result = build(model.eval(), inputs, arch=["sm_90"], name=f"cov_{name}", out=out)
        print(result.wheel.name, flush=True)


if __name__ == "__main__":
    main()
