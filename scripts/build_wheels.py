"""Build every wheel the GPU check needs into .carry/wheels (no GPU needed here).

    .venv/bin/python scripts/build_wheels.py [--samples-only] [--out .carry/wheels]

The four sample models (sm_80, sm_90); unless --samples-only, each sample again
with batch buckets (<sample>_buckets: --batch 1,2,4,8,16,32 --pad) and with a
dynamic batch (<sample>_dynamic: --dynamic batch=1:256), all sm_90, and one
package per construct of tests/models/coverage_models.py named cov_<construct> (sm_90),
sample_models/sampling_head.py at batch 1 and 16 (sm_90), and sample_models/quantized_decode.py
int8 and int4 (quantized_int8, quantized_int4) at batch 1, 4, 16 and 32 (sm_90), and, where
torchao is installed, sample_models/torchao_decode.py under each of its configs (torchao_<config>)
at batch 1, 16 and 64 (sm_80 and sm_90; float8 sm_90).
--shapes-only builds just the bucket and dynamic ones; --quantized-only just the quantized ones.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout

from aotcombo.builder.pipeline import build_package as build  # noqa: E402
from aotcombo.builder.inputs.modelfile import batch_inputs_function, load_model_file  # noqa: E402
from aotcombo.runtime.manifest import Buckets, Dynamic  # noqa: E402

SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")
BUCKETS = (1, 2, 4, 8, 16, 32)
DYNAMIC = (1, 256)


def build_shapes(out: Path) -> None:
    for name in SAMPLES:
        path = ROOT / "sample_models" / f"{name}.py"
        model, inputs = load_model_file(path)
        make = batch_inputs_function(path)
        for suffix, shapes in (("buckets", Buckets(BUCKETS, pad=True)), ("dynamic", Dynamic(*DYNAMIC))):
            start = time.perf_counter()
            result = build(model, inputs, arch=["sm_90"], name=f"{name}_{suffix}", out=out, make_inputs=make,
                           shapes=shapes)
            wheel = keep_one(result)
            print(f"{wheel.name}: {time.perf_counter() - start:.1f} s, {wheel.stat().st_size / 1e6:.2f} MB",
                  flush=True)


def build_sampling_head(out: Path) -> None:
    """sample_models/sampling_head.py at batch 1 and 16 (tests/gpu/test_gpu_sampling_head.py)."""
    path = ROOT / "sample_models" / "sampling_head.py"
    model, inputs = load_model_file(path)
    result = build(model, inputs, arch=["sm_90"], name="sampling_head", out=out,
                   make_inputs=batch_inputs_function(path), shapes=Buckets((1, 16)))
    print(keep_one(result).name, flush=True)


def build_quantized(out: Path) -> None:
    """sample_models/quantized_decode.py, int8 and int4, at batch 1, 4, 16 (kernels of ours) and 32
    (Inductor's) (tests/gpu/test_gpu_quantized.py)."""
    path = ROOT / "sample_models" / "quantized_decode.py"
    for name, model_fn in (("quantized_int8", "get_model"), ("quantized_int4", "get_int4_model")):
        start = time.perf_counter()
        model, inputs = load_model_file(path, model_fn)
        result = build(model, inputs, arch=["sm_90"], name=name, out=out, make_inputs=batch_inputs_function(path),
                       shapes=Buckets((1, 4, 16, 32)))
        print(f"{keep_one(result).name}: {time.perf_counter() - start:.1f} s", flush=True)


TORCHAO = {"int8_weight_only": ["sm_80", "sm_90"], "int4_weight_only": ["sm_80", "sm_90"],
           "int8_dynamic": ["sm_80", "sm_90"], "float8_dynamic": ["sm_90"]}


def build_torchao(out: Path) -> None:
    """sample_models/torchao_decode.py, one package per torchao config (tests/gpu/test_gpu_torchao.py)."""
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        print("torchao is not installed: no torchao_* packages (pip install 'aotcombo[quant]')", flush=True)
        return
    path = ROOT / "sample_models" / "torchao_decode.py"
    for config, archs in TORCHAO.items():
        start = time.perf_counter()
        model, inputs = load_model_file(path, f"get_{config}_model")
        result = build(model, inputs, arch=archs, name=f"torchao_{config}", out=out,
                       make_inputs=batch_inputs_function(path), shapes=Buckets((1, 16, 64)))
        print(f"{keep_one(result).name}: {time.perf_counter() - start:.1f} s", flush=True)


def keep_one(result) -> Path:
    """The wheel pip picks on the GPU machine (the native one; the pure one where none was
    built): only that one travels."""
    for wheel in result.wheels[:-1]:
        wheel.unlink()
    return result.wheels[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / ".carry" / "wheels"))
    parser.add_argument("--samples-only", action="store_true")
    parser.add_argument("--shapes-only", action="store_true")
    parser.add_argument("--quantized-only", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    if args.shapes_only:
        return build_shapes(out)
    if args.quantized_only:
        build_quantized(out)
        return build_torchao(out)
    for name in SAMPLES:
        start = time.perf_counter()
        model, inputs = load_model_file(ROOT / "sample_models" / f"{name}.py")
        result = build(model, inputs, arch=["sm_80", "sm_90"], name=name, out=out)
        print(f"{keep_one(result).name}: {time.perf_counter() - start:.1f} s", flush=True)
    if args.samples_only:
        return
    build_shapes(out)
    build_sampling_head(out)
    build_quantized(out)
    build_torchao(out)
    from aotcombo.testing.corpora import coverage_models as corpus

    coverage_models = corpus()
    for name, factory in {**coverage_models.SUPPORTED, **coverage_models.RANDOM}.items():
        model, inputs = factory()
        result = build(model.eval(), inputs, arch=["sm_90"], name=f"cov_{name}", out=out)
        print(keep_one(result).name, flush=True)


if __name__ == "__main__":
    main()
