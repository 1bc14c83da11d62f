"""What bench.py runs: the sample models and the variants of each, and how it loads them (the sample
file as a module, the installed aotcombo package with what its runtime's load() accepts).
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")
MEMORY_BOUND = {"branches", "adam_step"}
COLD_START_DEFAULT = ("transformer_block", "branches")
VARIANTS = {
    # name: (kind, options)
    "eager": ("eager", {}),
    "compile": ("compile", {}),
    "compile_combo": ("compile", {"options": {"combo_kernels": True}}),
    "compile_ro": ("compile", {"mode": "reduce-overhead"}),
    "aot": ("aot", {"graphs": False, "check_inputs": False}),
    "aot_checked": ("aot", {"graphs": False, "check_inputs": True}),
    "aot_graphs": ("aot", {"graphs": True, "check_inputs": False}),
    "aot_graphs_nocopy": ("aot", {"graphs": True, "check_inputs": False, "copy_outputs": False}),
    "aot_graphs_static": ("aot", {"graphs": True, "check_inputs": False, "copy_outputs": False, "static": True}),
}


class Skip(Exception):
    """A variant that cannot run here (no CUDA, no package, no graphs= in the runtime...)."""


def load_sample(name: str):
    """The sample model file as a module (a unique name: the wheels are importable as ``name``)."""
    spec = importlib.util.spec_from_file_location(f"_bench_sample_{name}", ROOT / "sample_models" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_params(pkg):
    """Names load() accepts, or None when it takes **kwargs we cannot see through."""
    for fn in (getattr(getattr(pkg, "_package", None), "load", None), getattr(pkg, "load", None)):
        if fn is None:
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return set(params)
    return None


def load_package(pkg, device: str, **wanted):
    """``pkg.load(device, **wanted)`` with what the installed runtime's load() accepts.

    Returns (model, kwargs passed, notes). Raises Skip when graphs=True is asked of a runtime
    without graph mode; drops other unknown options with a note (check_inputs then falls
    back to the Model's ``check_inputs`` attribute)."""
    kwargs, notes = dict(wanted), []

    def drop(k):
        if k == "graphs" and wanted[k]:
            raise Skip("the installed runtime's load() has no graphs=")
        kwargs.pop(k)
        if k != "graphs":  # graphs=False is what a runtime without graph mode does anyway
            notes.append(f"load() has no {k}=")

    params = _load_params(pkg)
    if params is not None:
        for k in [k for k in kwargs if k not in params]:
            drop(k)
    while True:
        try:
            m = pkg.load(device, **kwargs)
            break
        except TypeError as e:
            bad = next((k for k in kwargs if f"'{k}'" in str(e)), None)
            if bad is None:
                raise
            drop(bad)
    if "check_inputs" in wanted and "check_inputs" not in kwargs and hasattr(m, "check_inputs"):
        m.check_inputs = wanted["check_inputs"]
        notes.append(f"set model.check_inputs = {wanted['check_inputs']}")
    return m, kwargs, notes
