"""aotcombo: ahead-of-time kernel packager for PyTorch.

    import aotcombo
    wheel = aotcombo.build(model, example_inputs, arch=["sm_80", "sm_90"], name="mymodel", out="dist")
    wheel = aotcombo.build(model, example_inputs, shapes=aotcombo.Buckets((1, 2, 4, 8), pad=True))
    wheel = aotcombo.build(model, example_inputs, shapes=aotcombo.Dynamic(batch=(1, 32), seq=(1, 512)),
                           dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    info = aotcombo.inspect(wheel)          # archs, kernels, combos, launches per forward, ...
    weights = aotcombo.quantized_state_dict(model)  # a torchao model's weights as its package names them

``aotcombo.build(...)`` returns the path of the wheel that installs anywhere;
``aotcombo.build_package(...)`` takes the same arguments and returns the detailed
``BuildResult`` (every wheel written, the manifest, plans, sources, timings). Shape modes:
``Static()`` (the default), ``Buckets(sizes, pad=False)``, ``Dynamic(batch=(MIN, MAX), ...)``
(named axes other than the batch need ``dynamic_axes``, torch.onnx.export's form), and both:
``Buckets(sizes, axis="seq", dynamic=Dynamic(batch=(MIN, MAX)))``. Importing
``aotcombo`` is cheap: torch, triton and Inductor load on first use.
"""

__version__ = "0.1.0"

__all__ = ["build", "build_package", "inspect", "BuildResult", "BuildError", "Static", "Buckets", "Dynamic",
           "quantized_state_dict", "__version__"]

_LAZY = {
    "build_package": (".builder.pipeline", "build_package"),
    "BuildResult": (".builder.pipeline", "BuildResult"),
    "inspect": (".tools.inspection", "inspect_package"),
    "BuildError": (".errors", "BuildError"),
    "Static": (".runtime.manifest", "Static"),
    "Buckets": (".runtime.manifest", "Buckets"),
    "Dynamic": (".runtime.manifest", "Dynamic"),
}


def build(model, example_inputs, **options):
    """Build wheels of ``model`` for ``example_inputs``' shapes; returns the pure wheel's path.

    Options are ``BuildOptions.checked``'s: arch, name, out, version, dispatch, shapes, cache,
    jobs, native, weights, pdl; and ``build_package``'s: reporter, model_file, make_inputs,
    dynamic_axes."""
    from .builder.pipeline import build_package

    return build_package(model, example_inputs, **options).wheel


def quantized_state_dict(model) -> dict:
    """The ``state_dict()`` of ``model`` with torchao's quantized weights as the package holds
    them (``<layer>.weight.qdata``, ``.scale``, ...): what ``load(weights=...)`` takes for a
    package built with ``--weights external`` from a torchao-quantized model."""
    from .builder.kernels.linear.subclasses import flatten

    return flatten(model).state_dict()


def __getattr__(name):
    # Lazy: ``import aotcombo`` must not import torch.
    import importlib

    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module, __name__), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
