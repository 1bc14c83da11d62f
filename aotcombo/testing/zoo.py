"""The zoo on a GPU: the eager reference with the package's own weights, fresh inputs, tolerances.

A zoo package is ``zoo_<model>``, built from ``sample_models/zoo/<model>.py`` (see
``scripts/build_zoo.py``). The reference is that file's model built on the GPU machine
(its library version may differ from the build's) with the *package's* weights loaded by
name, so both sides compute with the same numbers. Inputs come from the file's
``get_example_inputs(seed=...)`` with seeds the build never used.

Tolerances (relative L2 over each output, ``compare.relative_error``): fp32 1e-4; integer
outputs exact; bf16/fp16 1e-2, or, for deep models where eager drifts, 2x eager's own error;
both low-precision errors are measured against eager run in fp32.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
from pathlib import Path

import torch

from .compare import leaves, relative_error
from .paths import sample_models

ZOO_DIR = sample_models("zoo")
ZOO = tuple(sorted(p.stem for p in ZOO_DIR.glob("*.py") if not p.stem.startswith("_")))
# full-size models (package ``full_<model>``, built with --weights external: the GPU side makes
# the model from its file and gives its state_dict to load)
FULL_SIZE_DIR = sample_models("full_size")
# Checked by a test of its own, not with the set (tests/gpu/test_gpu_llama_8b.py): 16 GB of weights.
OWN_TEST = ("llama_8b_decode", "llama_8b_batch")
FULL_SIZE = tuple(sorted(p.stem for p in FULL_SIZE_DIR.glob("*.py") if not p.stem.startswith("_")
                         and p.stem not in OWN_TEST))
LOW_PRECISION = (torch.bfloat16, torch.float16)


def at_batch(name: str) -> tuple[str, int | None]:
    """A zoo name split: ``MODEL@BATCH`` (the model at another batch size) gives (MODEL, BATCH),
    ``MODEL`` gives (MODEL, None)."""
    model, _, batch = name.partition("@")
    return model, int(batch) if batch else None


def package_name(name: str) -> str:
    """``zoo_MODEL``, or ``zoo_MODEL_bBATCH`` for ``MODEL@BATCH``."""
    model, batch = at_batch(name)
    return f"zoo_{model}" + (f"_b{batch}" if batch else "")


def example_inputs(name: str, seed: int = 0) -> tuple:
    """The model file's example inputs (CPU), at ``BATCH`` for ``MODEL@BATCH``."""
    model, batch = at_batch(name)
    sizes = {} if batch is None else {"batch": batch}
    return tuple(model_file(model).get_example_inputs(seed=seed, **sizes))


def model_file(model: str, folder: Path = ZOO_DIR):
    """The model file as a module, importing what lies next to it (``_weights.py``), as
    ``aotcombo build`` runs it."""
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    spec = importlib.util.spec_from_file_location(f"{folder.name}_file_{model}", folder / f"{model}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_weights(package) -> dict[str, torch.Tensor]:
    """The package's weights by the model's names, on the CPU."""
    m = package.manifest
    if m.weights.file is None:
        return {}
    tensors = torch.load(os.path.join(os.path.dirname(package.__file__), m.weights.file), weights_only=True)
    return {t.name: value for t, value in zip((t for t in m.weights.tensors if not t.external), tensors, strict=True)}


def eager_model(name: str, package, device="cuda") -> torch.nn.Module:
    """The file's model (``MODEL`` or ``MODEL@BATCH``) with the package's weights (names the
    model does not hold, such as constants the trace lifted out of forward, are left to the model)."""
    model = at_batch(name)[0]
    eager = model_file(model).get_model().eval()
    own = dict(eager.named_parameters()) | dict(eager.named_buffers())
    with torch.no_grad():
        for key, value in package_weights(package).items():
            if key in own:
                if own[key].shape != value.shape:
                    raise AssertionError(f"{model}: weight {key} is {tuple(value.shape)} in the package, "
                                         f"{tuple(own[key].shape)} in the model")
                own[key].copy_(value)
    return eager.to(device)


def fresh_inputs(name: str, seed: int, device="cuda") -> tuple:
    return tuple(t.to(device) for t in example_inputs(name, seed))


def as_float32(model: torch.nn.Module, inputs: tuple):
    """A float32 copy of a low-precision model and its floating inputs: the reference."""
    return copy.deepcopy(model).float(), tuple(t.float() if t.is_floating_point() else t for t in inputs)


def check(got, eager, reference=None) -> list[dict]:
    """Per output: the package's error and the verdict. ``reference``: eager in fp32, for
    low-precision models (then eager's own error against it is the yardstick too)."""
    rows = []
    for i, (g, e) in enumerate(zip(leaves(got), leaves(eager), strict=True)):
        row = {"output": i, "dtype": str(g.dtype).removeprefix("torch."), "shape": list(g.shape)}
        if g.shape != e.shape or g.dtype != e.dtype:
            why = f"shape/dtype {tuple(g.shape)}/{g.dtype} vs {tuple(e.shape)}/{e.dtype}"
            rows.append({**row, "ok": False, "why": why})
            continue
        if not g.is_floating_point():
            rows.append({**row, "ok": bool(torch.equal(g, e)), "error": 0.0 if torch.equal(g, e) else 1.0,
                         "tolerance": 0.0})
            continue
        if torch.isnan(g).any() and not torch.isnan(e).any():
            rows.append({**row, "ok": False, "why": "NaN in the package's output"})
            continue
        if g.dtype in LOW_PRECISION and reference is not None:
            r = leaves(reference)[i]
            error, eager_error = relative_error(g, r), relative_error(e, r)
            tolerance = max(1e-2, 2 * eager_error)
            rows.append({**row, "error": error, "eager_error": eager_error, "tolerance": tolerance,
                         "ok": error <= tolerance})
        else:
            error = relative_error(g, e)
            rows.append({**row, "error": error, "tolerance": 1e-4, "ok": error <= 1e-4})
    return rows


def assert_all_ok(report: list[dict], filename: str) -> None:
    """Append the check's rows to ``$OUT/<filename>`` (JSON lines) when OUT is set, then fail
    on any row not ok."""
    import json

    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, filename), "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in report)
    bad = [r for r in report if not r["ok"]]
    assert not bad, bad


def check_decode_steps(source, loaded, eager, reference, steps: int, device="cuda", **labels) -> list[dict]:
    """A decode-step package (a full-size file with ``MAX_CACHE``) against ``eager`` and its
    float32 ``reference``, all from an empty cache: ``steps`` steps of a fresh random token each
    (``source.get_example_inputs(pos=, seed=100 + pos)``), then the package's state against
    theirs; ``check``'s rows, each with ``labels``."""
    report = []
    with torch.no_grad():
        for pos in range(steps):
            inputs = tuple(t.to(device) for t in source.get_example_inputs(pos=pos, seed=100 + pos))
            rows = check(loaded(*inputs), eager(*inputs), reference(*inputs))
            report += [{**labels, "step": pos, **row} for row in rows]
        caches, caches32 = dict(eager.named_buffers()), dict(reference.named_buffers())
        for key, tensor in loaded.state().items():  # against float32's cache, as the logits
            rows = check(tensor, caches[key], caches32[key])
            report += [{**labels, "state": key, **row} for row in rows]
    return report
