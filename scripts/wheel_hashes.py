"""Build every zoo model and sample with this tree's code; write each pure wheel's sha256.

    .venv/bin/python scripts/wheel_hashes.py OUT_DIR        (OUT_DIR/hashes.json)

Builds are reproducible, so two trees' hashes tell which packages a change to the builder
leaves byte for byte as they were: those keep the GPU results they had. Run it in a worktree of
the commit before (``git worktree add /tmp/before REV``; from there, with this venv's python)
and in this one, then compare the two files. sm_90 only, the pure wheel only.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")


def main(out: Path) -> None:
    sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout
    import aotcombo
    from aotcombo.builder.inputs.modelfile import load_model_file
    from aotcombo.builder.pipeline import build_package
    from aotcombo.testing.zoo import ZOO, model_file

    assert Path(aotcombo.__file__).resolve().is_relative_to(ROOT), f"aotcombo from {aotcombo.__file__}, not {ROOT}"
    makers = {name: lambda name=name: (model_file(name).get_model().eval(),
                                       tuple(model_file(name).get_example_inputs()))
              for name in ZOO}
    makers.update({name: lambda name=name: load_model_file(ROOT / "sample_models" / f"{name}.py") for name in SAMPLES})
    hashes = {}
    for name, make in makers.items():
        start = time.perf_counter()
        try:
            model, inputs = make()
            wheel = build_package(model, inputs, arch=["sm_90"], name=name, out=out / name, native=False).wheel
            hashes[name] = hashlib.sha256(Path(wheel).read_bytes()).hexdigest()
        except Exception as exc:  # noqa: BLE001 - recorded; the others go on
            hashes[name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        print(f"{name:20} {hashes[name][:16]}  {time.perf_counter() - start:.0f} s", flush=True)
    (out / "hashes.json").write_text(json.dumps(hashes, indent=1) + "\n")


if __name__ == "__main__":  # the compile workers import this file: build only in the main process
    main(Path(sys.argv[1]))
