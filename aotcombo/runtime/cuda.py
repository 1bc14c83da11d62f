"""The CUDA driver API through ctypes: just what loading and launching Triton cubins takes.

``libcuda.so.1`` is opened on first use, never at import, so a package imports on a
machine without a GPU. Every call's CUresult is checked: a failure raises CudaError
(a RuntimeError) naming the call and the driver's own error name and text.
"""

from __future__ import annotations

import ctypes
import threading
from ctypes import POINTER, byref, c_char_p, c_int, c_uint, c_void_p

import torch

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

# The functions used, with their argument types; each returns a CUresult. None has a
# versioned (_v2) export: cuda.h renames only cuLaunchKernel, and only for per-thread
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


class CudaError(RuntimeError):
    """A CUDA driver call failed, or the driver could not be loaded."""


_lib = None
_lock = threading.Lock()


def _driver() -> ctypes.CDLL:
    """The driver library, opened and initialised (cuInit) on first use."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                try:
                    lib = ctypes.CDLL("libcuda.so.1")
                except OSError as e:
                    raise CudaError(f"cannot load the CUDA driver library libcuda.so.1 ({e}): "
                                    "an NVIDIA driver and a GPU are needed to run this model") from None
                for name, argtypes in _API.items():
                    try:
                        fn = getattr(lib, name)
                    except AttributeError:
                        raise CudaError(f"libcuda.so.1 has no {name}: the NVIDIA driver is too old") from None
                    fn.argtypes, fn.restype = argtypes, c_int
                _check(lib, "cuInit", lib.cuInit(0))
                _lib = lib
    return _lib


def _check(lib: ctypes.CDLL, call: str, result: int) -> None:
    if result:
        name, text = c_char_p(), c_char_p()
        lib.cuGetErrorName(result, byref(name)), lib.cuGetErrorString(result, byref(text))
        raise CudaError(f"{call} failed: {(name.value or b'CUDA error %d' % result).decode()}: "
                        f"{(text.value or b'unknown error').decode()}")


def _call(name: str, *args) -> None:
    lib = _driver()
    _check(lib, name, getattr(lib, name)(*args))


def primary_context(device_index: int) -> int:
    """Retain the primary context of a device (the one torch uses) and return it."""
    device, ctx = c_int(), c_void_p()
    _call("cuDeviceGet", byref(device), device_index)
    _call("cuDevicePrimaryCtxRetain", byref(ctx), device)
    return ctx.value


def current_context() -> int:
    """The calling thread's current context, 0 if none."""
    ctx = c_void_p()
    _call("cuCtxGetCurrent", byref(ctx))
    return ctx.value or 0


def set_current_context(ctx: int) -> None:
    _call("cuCtxSetCurrent", ctx or None)


def load_module(image: bytes) -> int:
    """Load a cubin, or PTX text, into the current context; returns the CUmodule."""
    if not image.startswith(b"\x7fELF") and not image.endswith(b"\0"):
        image += b"\0"  # PTX must be NUL-terminated
    module = c_void_p()
    _call("cuModuleLoadData", byref(module), image)
    return module.value


def get_function(module: int, name: str) -> int:
    function = c_void_p()
    _call("cuModuleGetFunction", byref(function), module, name.encode())
    return function.value


class Kernel:
    """One launch site of a compiled Triton kernel: ``kernel(stream, *args)`` launches it.

    The ctypes storage of the parameters is made once; a call writes each argument (a
    tensor's ``data_ptr()``, or a number) into it and calls cuLaunchKernel, under a lock
    since the storage is shared between threads. Triton >= 3.3 kernels take two more
    pointers after the declared parameters, global and profile scratch: NULL when the
    size is 0, else a device buffer of size x blocks, allocated per stream on first use.
    """

    def __init__(self, function: int, grid, num_warps: int, shared: int, params,
                 global_scratch=(0, 1), profile_scratch=(0, 1), device="cuda"):
        self._lib = _driver()
        try:
            self._slots = [_CTYPES["ptr" if k.startswith("*") else k]() for k in params]
        except KeyError as e:
            raise ValueError(f"unknown kernel parameter kind {e}; known: {', '.join(_CTYPES)}") from None
        tail = [c_void_p(), c_void_p()]
        blocks = grid[0] * grid[1] * grid[2]
        self._scratch = [(slot, size * blocks, align) for slot, (size, align)
                         in zip(tail, (global_scratch, profile_scratch)) if size]
        self._storage = self._slots + tail  # argv holds bare addresses: keep the storage alive
        self._argv = (c_void_p * len(self._storage))(*map(ctypes.addressof, self._storage))
        self._head = (function, *grid, 32 * num_warps, 1, 1, shared)
        self._device, self._buffers, self._lock = torch.device(device), {}, threading.Lock()
        if shared > 48 * 1024:
            _call("cuFuncSetAttribute", function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)

    def __call__(self, stream: int, *args) -> None:
        if len(args) != len(self._slots):
            raise TypeError(f"kernel takes {len(self._slots)} arguments, got {len(args)}")
        with self._lock:
            for slot, arg in zip(self._slots, args):
                slot.value = arg.data_ptr() if isinstance(arg, torch.Tensor) else arg
            if self._scratch:
                self._set_scratch(stream)
            result = self._lib.cuLaunchKernel(*self._head, stream, self._argv, None)
        if result:
            _check(self._lib, "cuLaunchKernel", result)

    def _set_scratch(self, stream: int) -> None:
        buffers = self._buffers.get(stream)
        if buffers is None:  # kept for the launcher's life: concurrent streams never share one
            buffers = self._buffers[stream] = [
                torch.empty(n + align, dtype=torch.uint8, device=self._device) for _, n, align in self._scratch]
        for (slot, _, align), buffer in zip(self._scratch, buffers):
            slot.value = -(-buffer.data_ptr() // align) * align
