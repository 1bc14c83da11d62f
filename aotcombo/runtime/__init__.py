"""The runtime every generated package carries (as ``<pkg>._runtime``): stdlib and torch only.

``Package(dir).load("cuda:0")`` reads the package's manifest.json, picks the cubin (or PTX)
variant for the GPU, loads its kernels through the CUDA driver API (``cuda``, ctypes), moves
the weights to the device once, and returns a model: by default a ``GraphModel`` that
replays the whole forward as one CUDA graph (graphs.py), else a ``Model`` that runs the
package's generated program op by op; a package built for several batch sizes gives a
``BucketedModel`` (buckets.py) or, with a dynamic batch, a ``GraphPerSize`` (a graph per
batch size). Calls check the inputs against the manifest first.
"""

from .buckets import BucketedModel
from .cuda import CudaError, Kernel
from .graphs import GraphModel, GraphPerSize
from .inputs import check_inputs, input_specs, make_guard
from .package import Model, Package, choose_variant

__all__ = ["BucketedModel", "CudaError", "GraphModel", "GraphPerSize", "Kernel", "Model", "Package", "check_inputs",
           "choose_variant", "input_specs", "make_guard"]
