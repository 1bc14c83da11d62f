"""Build the zoo's wheels for the GPU check, and count launches against torch.compile's combos.

    .venv/bin/python scripts/build_zoo.py [MODEL ...] [--out .carry/zoo] [--arch sm_90]

Each ``sample_models/zoo/<model>.py`` becomes package ``zoo_<model>``, and ``MODEL@BATCH`` (e.g.
``dlrm@512``) the model at another batch size, ``get_example_inputs(batch=BATCH)``, as package
``zoo_<model>_b<BATCH>`` (only the wheel pip picks on the GPU machine is kept: they travel there).
``zoo_build.json`` in the same folder
records, per model, the build time, wheel size, kernels, our launches per forward and those
of Inductor's own combo kernels (``torch.compile(options={"combo_kernels": True})``), both
counted on the traced program (kernel launches + extern calls), and the extern ops called.
A model that fails to build is recorded with its error and the others go on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout

from aotcombo.builder import graph as g  # noqa: E402
from aotcombo.builder.trace import entry as trace_entry  # noqa: E402
from aotcombo.builder.pipeline import build_package  # noqa: E402
from aotcombo.errors import BuildError  # noqa: E402
from aotcombo.testing.zoo import ZOO, at_batch, example_inputs, model_file, package_name  # noqa: E402


def inductor_combo_launches(model, inputs, arch: int) -> int:
    graph, _, _ = trace_entry.trace_model(model, inputs, arch, inductor_combo_kernels=True)
    return sum(isinstance(op, (g.Launch, g.Extern)) for op in graph.ops)


def build_one(name: str, out: Path, arch: str, pdl: bool = True) -> dict:
    model, inputs = model_file(at_batch(name)[0]).get_model().eval(), example_inputs(name)
    start = time.perf_counter()
    try:
        result = build_package(model, inputs, arch=[arch], name=package_name(name), out=out, jobs=2, pdl=pdl)
    except BuildError as exc:
        return {"model": name, "error": f"{exc.title}: {exc}"}
    seconds = time.perf_counter() - start
    for wheel in result.wheels[:-1]:
        wheel.unlink()
    summary, manifest = result.summary(), result.manifest
    return {
        "model": name, "build_s": round(seconds, 1), "wheel": result.wheels[-1].name,
        "wheel_bytes": result.wheels[-1].stat().st_size, "weights_bytes": manifest.weights.bytes,
        "kernels": summary["kernels"], "combos": summary["combos"], "extern_calls": summary["extern_calls"],
        "launches": summary["launches_per_forward"],
        "inductor_combo_launches": inductor_combo_launches(model, inputs, int(arch.removeprefix("sm_"))),
        "extern_ops": list(manifest.extern_ops), "private_ops": list(manifest.private_ops),
        "dtype": str(next((p.dtype for p in model.parameters()), "")).removeprefix("torch."),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(ZOO))
    parser.add_argument("--out", default=str(ROOT / ".carry" / "zoo"))
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--no-pdl", action="store_true", help="build without programmatic dependent launch (an A/B)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = out / "zoo_build.json"
    rows = {r["model"]: r for r in json.loads(record.read_text())} if record.exists() else {}
    for name in args.models:
        rows[name] = build_one(name, out, args.arch, pdl=not args.no_pdl)
        print(json.dumps(rows[name]), flush=True)
        record.write_text(json.dumps(sorted(rows.values(), key=lambda r: r["model"]), indent=1) + "\n")
    failed = [r["model"] for r in rows.values() if "error" in r]
    print(f"{len(rows) - len(failed)} built, {len(failed)} failed: {', '.join(failed) or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
