"""The runtime every generated package carries (as ``<pkg>._runtime``): stdlib and torch only.

``Package(dir).load("cuda:0")`` reads the package's manifest.json, picks the cubin (or PTX)
variant for the GPU, loads its kernels through the CUDA driver API (``cuda``, ctypes), moves
the weights to the device once, and returns a ``Model``: calling it checks the inputs and
runs the package's generated program, whose launches go to torch's current stream.
"""

from .cuda import CudaError, Kernel
from .package import Model, Package, check_inputs, choose_variant, input_specs

__all__ = ["CudaError", "Kernel", "Model", "Package", "check_inputs", "choose_variant", "input_specs"]
