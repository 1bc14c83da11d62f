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


def __getattr__(name):
    # Lazy: ``import aotcombo`` must not import torch.
    import importlib

    if name == "build":
        return importlib.import_module(".build", __name__)  # a callable module: returns the wheel's path
    if name in ("build_package", "BuildResult"):
        module = importlib.import_module(".build", __name__)
        return module.build if name == "build_package" else module.BuildResult
    if name == "inspect":
        return importlib.import_module(".inspection", __name__).inspect_package
    if name == "BuildError":
        return importlib.import_module(".errors", __name__).BuildError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
