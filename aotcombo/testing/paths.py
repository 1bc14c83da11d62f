"""Where the source checkout is: the folder above the ``aotcombo`` package, holding
``sample_models/`` (the test support reads model files from it; an installed aotcombo has none)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def checkout() -> Path:
    """The source checkout aotcombo is imported from; raises when there is none."""
    if not (ROOT / "sample_models").is_dir():
        raise RuntimeError(f"aotcombo.testing needs a source checkout of aotcombo (sample_models/ beside the "
                           f"aotcombo package); none at {ROOT}: run from a clone, with it on PYTHONPATH or "
                           f"installed editable (pip install -e .)")
    return ROOT


def sample_models(*parts: str) -> Path:
    """``sample_models/<parts...>`` of the source checkout."""
    return checkout().joinpath("sample_models", *parts)


def sample_model(name: str) -> ModuleType:
    """The model file ``sample_models/<name>.py`` as a module of its own name (``<name>_sample``):
    the package built from it takes ``<name>``."""
    spec = importlib.util.spec_from_file_location(f"{name}_sample", sample_models(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
