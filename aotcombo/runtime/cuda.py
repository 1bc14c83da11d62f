"""The CUDA driver API through ctypes: just what loading and launching Triton cubins takes.

``libcuda.so.1`` is opened on first use, never at import, so a package imports on a
machine without a GPU. Every call's CUresult is checked: a failure raises CudaError
(a RuntimeError) naming the call and the driver's own error name and text.

Launching: ``Kernel.bind(stream)`` returns a launcher, ``launch(*args)``, made by the
module attribute ``launcher``: ``_native_launcher`` when the C launcher ``_launch``
(``_launch.c``, compiled into the wheel at build time as ``_launch.abi3.so``) imports,
else ``_ctypes_launcher``. Both take the same arguments and raise the same errors.
``AOTCOMBO_LAUNCHER=ctypes`` in the environment (read at import), or setting
``launcher = _ctypes_launcher`` before a model's first call, forces the ctypes one.

The C one holds everything but the tensors' pointers; a launch asks each tensor for its
``data_ptr()`` and calls cuLaunchKernel(Ex) directly, the parameter values on the C
stack, so concurrent launches never share them (host costs of both launchers:
benchmarks/launch_overhead.py). It takes pointer and integer parameters (a dynamic
batch's sizes): a kernel with a floating-point parameter launches through ctypes.

The ctypes one prebuilds everything but the parameter values; a launch packs the
arguments' ``data_ptr()`` into the parameter storage and makes a single foreign call,
through a PyDLL handle: it keeps the GIL during the call (CPython 3.10-3.12; a
free-threaded build would need a lock per launcher).
"""

from __future__ import annotations

import ctypes
import functools
import os
import struct
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_void_p

import torch

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
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
    "cuLaunchKernel": [c_void_p, *[c_uint] * 7, c_void_p, c_void_p, c_void_p],
}

# Kernel parameter kinds (Triton's scalar type names; "ptr" or "*..." for pointers).
_CTYPES = {
    "ptr": c_void_p, "i1": ctypes.c_int8, "i8": ctypes.c_int8, "i16": ctypes.c_int16,
    "i32": ctypes.c_int32, "i64": ctypes.c_int64, "u1": ctypes.c_uint8, "u8": ctypes.c_uint8,
    "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
    "fp32": ctypes.c_float, "fp64": ctypes.c_double,
}


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig: grid, block, shared memory and stream of a cuLaunchKernelEx."""

    _fields_ = [("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint), ("stream", c_void_p),
                ("attrs", c_void_p), ("num_attrs", c_uint)]


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
        # cuLaunchKernelEx (CUDA >= 11.8; what Triton calls) takes 4 arguments to ctypes' 11
        self.launch_ex, self.launch = getattr(fast, "cuLaunchKernelEx", None), fast.cuLaunchKernel
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


class Kernel:
    """A loaded Triton kernel with its launch fixed: grid, warps, shared memory, parameter kinds.

    Triton >= 3.3 kernels take two more pointers after the declared parameters, global
    and profile scratch: NULL when the size is 0, else a device buffer of size x blocks,
    allocated per bound stream, so concurrent streams never share one.
    """

    def __init__(self, function: int, grid, num_warps: int, shared: int, params,
                 global_scratch=(0, 1), profile_scratch=(0, 1), device="cuda"):
        self.driver = _driver()
        unknown = [k for k in params if not k.startswith("*") and k not in _CTYPES]
        if unknown:
            raise ValueError(f"unknown kernel parameter kind {unknown[0]!r}; known: {', '.join(_CTYPES)}")
        self.function, self.grid, self.block, self.shared = function, tuple(grid), 32 * num_warps, shared
        self.params = ["ptr" if k.startswith("*") else k for k in params]
        blocks = grid[0] * grid[1] * grid[2]
        self.scratch = [(size * blocks, align) for size, align in (global_scratch, profile_scratch)]
        self.device, self._bound = torch.device(device), {}
        if shared > 48 * 1024:
            self.driver.call("cuFuncSetAttribute", function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)

    def bind(self, stream: int):
        """A launcher of this kernel on ``stream`` (a raw CUstream), allocating its scratch
        on torch's current stream, which should be ``stream``."""
        buffers = [torch.empty(size + align, dtype=torch.uint8, device=self.device) if size else None
                   for size, align in self.scratch]
        pointers = [-(-b.data_ptr() // align) * align if b is not None else 0
                    for b, (_, align) in zip(buffers, self.scratch)]
        return launcher(self, stream, pointers, buffers)

    def __call__(self, stream: int, *args) -> None:
        """Launch on ``stream`` (binds once per stream; the program calls bound launchers)."""
        launch = self._bound.get(stream) or self._bound.setdefault(stream, self.bind(stream))
        launch(*args)


def _ctypes_launcher(kernel: Kernel, stream: int, scratch: list[int], keep_alive):
    """``launch(*args)``: ``kernel`` on ``stream`` through ctypes: cuLaunchKernelEx, or cuLaunchKernel
    on a driver older than CUDA 11.8."""
    n, pointers_only = len(kernel.params), all(k == "ptr" for k in kernel.params)
    if pointers_only:  # all aotcombo builds: the parameters are one packed array
        storage = (ctypes.c_uint64 * (n + 2))(*[0] * n, *scratch)
        addresses = [ctypes.addressof(storage) + 8 * i for i in range(n + 2)]
    else:
        storage = [_CTYPES[k]() for k in kernel.params] + [c_void_p(p) for p in scratch]
        addresses = [ctypes.addressof(slot) for slot in storage]
    argv = (c_void_p * (n + 2))(*addresses)
    call, config = _launch_call(kernel, stream, argv)
    launch = (_pointers_launch if pointers_only else _slots_launch)(kernel.driver, call, storage, n)
    launch.keep_alive = (storage, argv, config, keep_alive)  # the call holds bare addresses
    return launch


def _launch_call(kernel: Kernel, stream: int, argv) -> tuple:
    """(function, arguments) of the driver call that launches ``kernel`` on ``stream``
    with parameters ``argv``, and the launch config it points to (None without one)."""
    function, block, launch_ex = c_void_p(kernel.function), (kernel.block, 1, 1), kernel.driver.launch_ex
    if launch_ex is not None:
        config = LaunchConfig(kernel.grid, block, kernel.shared, stream, None, 0)
        return (launch_ex, (c_void_p(ctypes.addressof(config)), function, argv, None)), config
    return (kernel.driver.launch, (function, *map(c_uint, kernel.grid + block), c_uint(kernel.shared),
                                   c_void_p(stream), argv, None)), None


def _pointers_launch(driver: _Driver, call: tuple, storage, n: int):
    """A launch that packs every argument's ``data_ptr()`` into the array (all tensors)."""
    (cu_launch, head), data_ptr, pack = call, torch.Tensor.data_ptr, struct.Struct(f"{n}Q").pack_into

    def launch(*args):
        try:
            pack(storage, 0, *map(data_ptr, args))
        except struct.error:
            raise TypeError(f"kernel takes {n} arguments, got {len(args)}") from None
        result = cu_launch(*head)
        if result:
            driver.check(cu_launch.__name__, result)

    return launch


def _slots_launch(driver: _Driver, call: tuple, storage: list, n: int):
    """A launch that writes each argument, tensor or number, into its typed slot."""
    (cu_launch, head), slots = call, storage[:n]

    def launch(*args):
        if len(args) != n:
            raise TypeError(f"kernel takes {n} arguments, got {len(args)}")
        for slot, arg in zip(slots, args):
            slot.value = arg.data_ptr() if isinstance(arg, torch.Tensor) else arg
        result = cu_launch(*head)
        if result:
            driver.check(cu_launch.__name__, result)

    return launch


_INTEGERS = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"}


def _native_launcher(kernel: Kernel, stream: int, scratch: list[int], keep_alive):
    """``launch(*args)``: ``kernel`` on ``stream`` through the C launcher (``_launch.c``), tensors
    and integers (a dynamic batch's sizes); through ctypes when it is not there or the kernel has
    floating-point parameters."""
    if _launch is None or any(k != "ptr" and k not in _INTEGERS for k in kernel.params):
        return _ctypes_launcher(kernel, stream, scratch, keep_alive)
    driver = kernel.driver
    ex = driver.launch_ex is not None
    cu_launch = driver.launch_ex if ex else driver.launch
    kinds = bytes(b"p"[0] if k == "ptr" else b"i"[0] for k in kernel.params)
    return _launch.launcher(ctypes.cast(cu_launch, c_void_p).value, ex, kernel.function, kernel.grid,
                            (kernel.block, 1, 1), kernel.shared, stream, len(kernel.params), tuple(scratch),
                            torch.Tensor.data_ptr, functools.partial(driver.check, cu_launch.__name__), keep_alive,
                            kinds)


try:
    from . import _launch
except ImportError:  # built without a C compiler, or another platform or Python than the build's
    _launch = None

launcher = _ctypes_launcher if _launch is None or os.environ.get("AOTCOMBO_LAUNCHER") == "ctypes" else _native_launcher
