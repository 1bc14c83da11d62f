"""The CUDA driver API through ctypes: just what loading and launching Triton cubins takes.

``libcuda.so.1`` is opened on first use, never at import, so a package imports on a
machine without a GPU. Every call's CUresult is checked: a failure raises CudaError
(a RuntimeError) naming the call and the driver's own error name and text.

Launching: ``LoadedKernel.bind(stream)`` returns ``launch(*args)``, which holds the whole
``cuLaunchKernelEx`` call but the argument values. Two makers of it, with the same
arguments and errors: the C launcher (``_launch.c``, in the native wheel as
``_launch.abi3.so``: 3.5 us a launch on an H100 host), when it imports, else ctypes
(4.6 us: the arguments are packed into a prebuilt buffer with one ``struct.pack_into``,
and one foreign call made through a PyDLL handle, which keeps the GIL).
``AOTCOMBO_LAUNCHER=ctypes`` (read at import) forces the ctypes one. Graph mode calls
a launcher only while it captures; the op-by-op mode calls one per kernel per call.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import os
import struct
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_void_p

import torch

from .torch_private import current_raw_stream

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
LIBRARY = "libcuda.so.1"

# The functions used, with their argument types; each returns a CUresult. None has a
# versioned (_v2) export: cuda.h renames only the launches, and only for per-thread
# default stream builds (to _ptsz), which we do not want: torch's streams are explicit.
_API = {
    "cuGetErrorName": [c_int, POINTER(c_char_p)],
    "cuGetErrorString": [c_int, POINTER(c_char_p)],
    "cuInit": [c_uint],
    "cuDeviceGet": [POINTER(c_int), c_int],
    "cuDevicePrimaryCtxRetain": [POINTER(c_void_p), c_int],
    "cuCtxGetCurrent": [POINTER(c_void_p)],
    "cuCtxSetCurrent": [c_void_p],
    "cuModuleLoadData": [POINTER(c_void_p), c_char_p],
    "cuModuleGetFunction": [POINTER(c_void_p), c_void_p, c_char_p],
    "cuFuncSetAttribute": [c_void_p, c_int, c_int],
}

# Kernel parameter kinds (Triton's type names; "ptr" for pointers), each passed in an
# 8-byte slot: (struct format of the value and its padding, the C launcher's kind).
PARAMS = {
    "ptr": ("Q", "p"), "i1": ("b7x", "i"), "i8": ("b7x", "i"), "i16": ("h6x", "i"), "i32": ("i4x", "i"),
    "i64": ("q", "i"), "u1": ("B7x", "i"), "u8": ("B7x", "i"), "u16": ("H6x", "i"), "u32": ("I4x", "i"),
    "u64": ("Q", "i"), "fp32": ("f4x", "f"), "fp64": ("d", "d"),
}


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig: grid, block, shared memory and stream of a cuLaunchKernelEx."""

    _fields_ = [("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint), ("stream", c_void_p),
                ("attrs", c_void_p), ("num_attrs", c_uint)]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id and a 64-byte union of values (8-byte aligned)."""

    _fields_ = [("id", c_int), ("value", ctypes.c_uint64 * 8)]


def programmatic() -> LaunchAttribute:
    """The attribute of a programmatic dependent launch (PDL, sm_90 and later): the kernel may
    start while the one before it on the stream runs, and waits for it itself
    (griddepcontrol.wait, which the build put at its top)."""
    attribute = LaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value[0] = 1  # programmaticStreamSerializationAllowed, an int: little-endian
    return attribute


class CudaError(RuntimeError):
    """A CUDA driver call failed, or the driver could not be loaded."""


class _Driver:
    """libcuda opened twice: ``lib`` (CDLL, typed) for setup calls, ``fast`` (PyDLL,
    untyped: arguments are prebuilt ctypes objects) for the per-call ones."""

    def __init__(self, path: str):
        try:
            self.lib, fast = ctypes.CDLL(path), ctypes.PyDLL(path)
        except OSError as e:
            raise CudaError(f"cannot load the CUDA driver library {path} ({e}): "
                            "an NVIDIA driver and a GPU are needed to run this model") from None
        for name, argtypes in _API.items():
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise CudaError(f"{path} has no {name}: the NVIDIA driver is too old") from None
            fn.argtypes, fn.restype = argtypes, c_int
        try:  # CUDA >= 11.8, what Triton calls: 4 arguments to cuLaunchKernel's 11
            self.launch = fast.cuLaunchKernelEx
        except AttributeError:
            raise CudaError(f"{path} has no cuLaunchKernelEx: the NVIDIA driver is older than CUDA 11.8") from None
        self.get_context = fast.cuCtxGetCurrent
        self.context = c_void_p()  # cuCtxGetCurrent's out-parameter, written under the GIL
        self.context_ref = byref(self.context)
        self.check("cuInit", self.lib.cuInit(0))

    def check(self, call: str, result: int) -> None:
        if result:
            name, text = c_char_p(), c_char_p()
            self.lib.cuGetErrorName(result, byref(name)), self.lib.cuGetErrorString(result, byref(text))
            raise CudaError(f"{call} failed: {(name.value or b'CUDA error %d' % result).decode()}: "
                            f"{(text.value or b'unknown error').decode()}")

    def call(self, name: str, *args) -> None:
        self.check(name, getattr(self.lib, name)(*args))


_driver_instance = None
_lock = threading.Lock()


def _driver() -> _Driver:
    """The driver, opened and initialised (cuInit) on first use."""
    global _driver_instance
    if _driver_instance is None:
        with _lock:
            if _driver_instance is None:
                _driver_instance = _Driver(LIBRARY)
    return _driver_instance


def primary_context(device_index: int) -> int:
    """Retain the primary context of a device (the one torch uses) and return it."""
    device, ctx = c_int(), c_void_p()
    _driver().call("cuDeviceGet", byref(device), device_index)
    _driver().call("cuDevicePrimaryCtxRetain", byref(ctx), device)
    return ctx.value


def current_context() -> int:
    """The calling thread's current context, 0 if none."""
    d = _driver()
    result = d.get_context(d.context_ref)
    if result:
        d.check("cuCtxGetCurrent", result)
    return d.context.value or 0


def set_current_context(ctx: int) -> None:
    _driver().call("cuCtxSetCurrent", ctx or None)


def load_module(image: bytes) -> int:
    """Load a cubin, or PTX text, into the current context; returns the CUmodule."""
    if not image.startswith(b"\x7fELF") and not image.endswith(b"\0"):
        image += b"\0"  # PTX must be NUL-terminated
    module = c_void_p()
    _driver().call("cuModuleLoadData", byref(module), image)
    return module.value


def get_function(module: int, name: str) -> int:
    function = c_void_p()
    _driver().call("cuModuleGetFunction", byref(function), module, name.encode())
    return function.value


def current_stream(device_index: int) -> int:
    """torch's current stream on a device, as a raw CUstream."""
    return current_raw_stream(device_index)


class LoadedKernel:
    """A loaded Triton kernel with its launch fixed: grid, warps, shared memory, parameter kinds.

    Triton >= 3.3 kernels take two more pointers after the declared parameters, global
    and profile scratch: NULL when the size is 0, else a device buffer of size x blocks,
    allocated per bound stream, so concurrent streams never share one.
    """

    def __init__(self, function: int, grid, num_warps: int, shared: int, params,
                 global_scratch=(0, 1), profile_scratch=(0, 1), device="cuda", pdl: bool = False):
        self.driver = _driver()
        unknown = [k for k in params if k not in PARAMS]
        if unknown:
            raise ValueError(f"unknown kernel parameter kind {unknown[0]!r}; known: {', '.join(PARAMS)}")
        self.function, self.grid, self.block, self.shared = function, tuple(grid), 32 * num_warps, shared
        self.params, self.pdl = tuple(params), pdl
        blocks = grid[0] * grid[1] * grid[2]
        self.scratch = [(size * blocks, align) for size, align in (global_scratch, profile_scratch)]
        self.device = torch.device(device)
        if shared > 48 * 1024:
            self.driver.call("cuFuncSetAttribute", function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)

    def sized(self, grid: int) -> LoadedKernel:
        """This kernel with a 1-D grid of ``grid`` programs (a dynamic batch's launch)."""
        sized = copy.copy(self)
        sized.grid = (grid, 1, 1)
        return sized

    def bind(self, stream: int):
        """A launcher of this kernel on ``stream`` (a raw CUstream), allocating its scratch
        on torch's current stream, which should be ``stream``."""
        buffers = [torch.empty(size + align, dtype=torch.uint8, device=self.device) if size else None
                   for size, align in self.scratch]
        pointers = [-(-b.data_ptr() // align) * align if b is not None else 0
                    for b, (_, align) in zip(buffers, self.scratch)]
        return launcher(self, stream, pointers, buffers)


def _config(kernel: LoadedKernel, stream: int) -> tuple[LaunchConfig, object]:
    """The launch's config, and the attribute it points at (keep it alive as long)."""
    if not kernel.pdl:
        return LaunchConfig(kernel.grid, (kernel.block, 1, 1), kernel.shared, stream, None, 0), None
    attribute = programmatic()
    return LaunchConfig(kernel.grid, (kernel.block, 1, 1), kernel.shared, stream, ctypes.addressof(attribute), 1), \
        attribute


def ctypes_launcher(kernel: LoadedKernel, stream: int, scratch: list[int], keep_alive):
    """``launch(*args)``: ``kernel`` on ``stream`` through ctypes: the arguments (tensors,
    ints, floats) packed into one buffer of 8-byte slots, then one cuLaunchKernelEx."""
    n = len(kernel.params)
    pack = struct.Struct("<" + "".join(PARAMS[k][0] for k in kernel.params)).pack_into
    storage = (ctypes.c_uint64 * (n + 2))(*[0] * n, *scratch)
    argv = (c_void_p * (n + 2))(*[ctypes.addressof(storage) + 8 * i for i in range(n + 2)])
    config, attribute = _config(kernel, stream)
    cu_launch, driver = kernel.driver.launch, kernel.driver
    head = (c_void_p(ctypes.addressof(config)), c_void_p(kernel.function), argv, None)
    tensor, data_ptr = torch.Tensor, torch.Tensor.data_ptr
    pointers_only = all(k == "ptr" for k in kernel.params)

    def launch(*args):
        try:
            pack(storage, 0, *(map(data_ptr, args) if pointers_only else
                               (a.data_ptr() if isinstance(a, tensor) else a for a in args)))
        except (struct.error, TypeError):
            if len(args) != n:
                raise TypeError(f"kernel takes {n} arguments, got {len(args)}") from None
            raise TypeError(f"kernel takes ({', '.join(kernel.params)}), got "
                            f"({', '.join(type(a).__name__ for a in args)})") from None
        result = cu_launch(*head)
        if result:
            driver.check("cuLaunchKernelEx", result)

    launch.keep_alive = (storage, argv, config, attribute, keep_alive)  # the call holds bare addresses
    return launch


def native_launcher(kernel: LoadedKernel, stream: int, scratch: list[int], keep_alive):
    """``launch(*args)``: ``kernel`` on ``stream`` through the C launcher (``_launch.c``)."""
    driver = kernel.driver
    kinds = "".join(PARAMS[k][1] for k in kernel.params).encode()
    return _launch.launcher(ctypes.cast(driver.launch, c_void_p).value, kernel.function, kernel.grid,
                            (kernel.block, 1, 1), kernel.shared, stream, tuple(scratch), torch.Tensor.data_ptr,
                            functools.partial(driver.check, "cuLaunchKernelEx"), keep_alive, kinds, kernel.pdl)


try:
    from . import _launch
except ImportError:  # the pure wheel, or another platform or Python than the native wheel's
    _launch = None

launcher = ctypes_launcher if _launch is None or os.environ.get("AOTCOMBO_LAUNCHER") == "ctypes" else native_launcher
