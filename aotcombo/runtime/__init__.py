"""The runtime every generated package carries (as ``<pkg>._runtime``): stdlib and torch only.

``Package(dir).load("cuda:0")`` reads the package's manifest.json, picks the cubin (or PTX)
variant for the GPU, loads its kernels through the CUDA driver API (``cuda``, ctypes), moves
the weights to the device once, and returns a model: by default a ``GraphModel`` that
replays the whole forward as one CUDA graph (graphs.py; captured at its second call, the
first runs op by op), else a ``Model`` that runs the package's generated program op by op;
a package built for several batch sizes gives a ``BucketedModel`` (buckets.py) or, with
dynamic axes, a ``GraphPerSize`` (per_size.py: a graph per distinct sizes; ``SizeClasses``,
size_classes.py, when calls of a few tokens have a program of their own). Calls check the inputs against
the manifest first. Which path a call takes, and what each costs: graphs.py and
docs/architecture.md. torch's private API is used in torch_private.py only.
"""

import importlib

_EXPORTS = {
    "BucketedModel": "buckets", "CudaError": "cuda", "LoadedKernel": "cuda", "GraphModel": "graphs",
    "GraphPerSize": "per_size", "SizeClasses": "size_classes", "InputSpec": "inputs", "check_inputs": "inputs",
    "make_input_check": "inputs",
    "Model": "loader", "Package": "loader", "choose_variant": "checks", "Manifest": "manifest",
}
__all__ = ["BucketedModel", "CudaError", "GraphModel", "GraphPerSize", "InputSpec", "LoadedKernel", "Manifest", "Model",
           "Package", "SizeClasses", "check_inputs", "choose_variant", "make_input_check"]


_MODULES = ("bound", "buckets", "cuda", "graphs", "inputs", "loader", "manifest", "ops", "outputs", "per_size",
            "repoint", "size_classes", "state", "torch_private")


def __getattr__(name):
    # Lazy, so that ``manifest`` imports without torch (the build's options read it).
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
