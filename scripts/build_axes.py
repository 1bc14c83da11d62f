"""Build the wheels of the dynamic-axes check and benchmark into .carry/axes (no GPU needed).

    .venv/bin/python scripts/build_axes.py [--out .carry/axes] [--no-exact]

- ``full_bert_base_dyn``: BERT-base (sample_models/full_size/bert_base.py) with
  ``--dynamic batch=1:32,seq=1:512``, ``--weights external``;
- ``zoo_t5_encoder_dyn``: the zoo's T5 encoder with ``--dynamic batch=1:8,seq=1:128``;
- ``full_bert_base_seq``: BERT-base with ``--buckets seq=16,32,64,128 --pad --dynamic batch=1:8``;
- unless ``--no-exact``, ``full_bert_base_b<B>_s<S>``: BERT-base built for exactly each shape
  ``benchmarks/axes_bench.py`` times (the yardstick a dynamic package is held to).
All sm_90, build cache off. Prints each build's time and wheel size, and the dynamic build's
against the static one at the example shape (8 x 128): builds in this one warm process, the model
loaded once (``scripts/build_times.py`` times the whole command, as a user runs it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout

from aotcombo.builder.pipeline import build_package as build  # noqa: E402
from aotcombo.runtime.manifest import Buckets, Dynamic  # noqa: E402
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file  # noqa: E402

BERT_RANGES = {"batch": (1, 32), "seq": (1, 512)}
T5_RANGES = {"batch": (1, 8), "seq": (1, 128)}
SEQ_BUCKETS = Buckets((16, 32, 64, 128), pad=True, axis="seq", dynamic=Dynamic(batch=(1, 8)))  # batch: per bucket
BENCH_SHAPES = ((1, 7), (1, 128), (2, 77), (4, 129), (8, 128), (8, 383), (16, 256), (32, 512))


def timed_build(name: str, out: Path, model, inputs, **options) -> tuple[float, int]:
    start = time.perf_counter()
    result = build(model, inputs, arch=["sm_90"], name=name, out=out, cache=False, **options)
    for wheel in result.wheels[:-1]:  # only the one pip picks on the GPU machine travels
        wheel.unlink()
    seconds, size = time.perf_counter() - start, result.wheels[-1].stat().st_size
    print(f"{result.wheels[-1].name}: {seconds:.1f} s, {size / 1e3:.0f} kB", flush=True)
    return seconds, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / ".carry" / "axes"))
    parser.add_argument("--no-exact", action="store_true", help="skip the packages built for one shape each")
    parser.add_argument("--seq-buckets-only", action="store_true", help="only full_bert_base_seq")
    args = parser.parse_args()
    out = Path(args.out)
    bert = model_file("bert_base", FULL_SIZE_DIR)
    model = bert.get_model()
    if args.seq_buckets_only:
        timed_build("full_bert_base_seq", out, model, bert.get_example_inputs(), weights="external",
                    shapes=SEQ_BUCKETS, dynamic_axes=bert.get_dynamic_axes())
        return
    static = None
    for batch, seq in () if args.no_exact else BENCH_SHAPES:  # first: the dynamic build is timed warm too
        timing = timed_build(f"full_bert_base_b{batch}_s{seq}", out, model, bert.get_example_inputs(batch, seq),
                             weights="external")
        static = timing if (batch, seq) == (8, 128) else static
    dynamic = timed_build("full_bert_base_dyn", out, model, bert.get_example_inputs(), weights="external",
                          shapes=Dynamic(**BERT_RANGES), dynamic_axes=bert.get_dynamic_axes())
    if static is not None:
        print(f"dynamic (2 axes) against static at 8 x 128, in this process: build time {dynamic[0] / static[0]:.2f}x, "
              f"wheel {dynamic[1] / static[1]:.2f}x", flush=True)
    timed_build("full_bert_base_seq", out, model, bert.get_example_inputs(), weights="external",
                shapes=SEQ_BUCKETS, dynamic_axes=bert.get_dynamic_axes())
    t5 = model_file("t5_encoder")
    timed_build("zoo_t5_encoder_dyn", out, t5.get_model(), t5.get_example_inputs(), shapes=Dynamic(**T5_RANGES),
                dynamic_axes=t5.get_dynamic_axes())

if __name__ == "__main__":
    main()
