"""aotcombo: ahead-of-time kernel packager for PyTorch.

    import aotcombo
    wheel = aotcombo.build(model, example_inputs, arch=["sm_80", "sm_90"], name="mymodel", out="dist")
    info = aotcombo.inspect(wheel)          # archs, kernels, combos, launches per forward, ...

``aotcombo.build(...)`` returns the wheel's path; ``aotcombo.build_package(...)``
takes the same arguments and returns the detailed ``BuildResult``. Importing
``aotcombo`` is cheap: torch, triton and Inductor load on first use.
"""

__version__ = "0.1.0"

__all__ = ["build", "build_package", "inspect", "BuildResult", "BuildError", "__version__"]


def build(model, example_inputs, *, arch=("sm_80", "sm_90"), name="model", out="dist", **options):
    """Build a wheel of ``model`` for ``example_inputs``' shapes; returns the wheel's path.

    Options are ``pipeline.build_package``'s: dispatch, version, cache, jobs, reporter."""
    from .pipeline import build_package

    return build_package(model, example_inputs, arch=arch, name=name, out=out, **options).wheel


def __getattr__(name):
    # Lazy: ``import aotcombo`` must not import torch.
    import importlib

    if name in ("build_package", "BuildResult"):
        return getattr(importlib.import_module(".pipeline", __name__), name)
    if name == "inspect":
        return importlib.import_module(".inspection", __name__).inspect_package
    if name == "BuildError":
        return importlib.import_module(".errors", __name__).BuildError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
