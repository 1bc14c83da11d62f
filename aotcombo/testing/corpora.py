"""The model corpora of the tests, loaded by path: ``tests/models/coverage_models.py`` (one small
model per construct Inductor can emit) and ``tests/models/combo_test_models.py`` (PyTorch's
combo-kernel tests as models).

They are model code, not test support, and must stay outside the ``aotcombo`` package: the
builder takes code inside it for its own (``usercode.code_kind``: versioned), so the build
cache would name a model there by its line rather than its source (an edit would hit a stale
trace) and a build error would not point at the model's line, as it does for a user's model.
Each loads once per process, under its own name (``sys.modules``), from the source checkout.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .paths import checkout

FOLDER = ("tests", "models")


def path(name: str) -> Path:
    """``tests/models/<name>.py`` of the source checkout."""
    return checkout().joinpath(*FOLDER, f"{name}.py")


def load(name: str) -> ModuleType:
    """The corpus ``name`` as a module, loaded once (a later call, or ``import name`` from its
    folder, gives the same module)."""
    file = path(name)
    module = sys.modules.get(name)
    if module is not None and Path(getattr(module, "__file__", "") or "").resolve() == file.resolve():
        return module
    if not file.is_file():
        raise FileNotFoundError(f"no model corpus {name!r}: {file} is missing")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def coverage_models() -> ModuleType:
    return load("coverage_models")


def combo_test_models() -> ModuleType:
    return load("combo_test_models")
