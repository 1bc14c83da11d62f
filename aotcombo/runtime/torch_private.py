"""Every use of torch's private API in the runtime, and why each is needed.

Everything else in the runtime calls torch's public API only. A package runs on every torch
release its manifest admits (``Manifest.torch``, checked at load), so each use here either
has a fallback or is checked before it is trusted:

- ``current_raw_stream(index)``: torch's current stream as a raw ``CUstream``
  (``torch._C._cuda_getCurrentRawStream``), read at every call in every mode; the public
  ``torch.cuda.current_stream(index).cuda_stream``, the fallback, makes a Stream object each time.
- ``native_guard(templates, capacity)``: the C guard of bound graphs (``_guard.c``; bound.py).
  It reads tensors through torch's stable C shim (``aoti_torch_get_*``, the functions
  AOTInductor's packages call), which takes an ``at::Tensor*``: the one a Python tensor holds
  right after its object header, a private layout. It is trusted only where that word equals
  ``Tensor._cdata`` (the TensorImpl address) on tensors of five kinds; else None.
- ``tensor_guards(templates)``: torch's ``TensorGuards`` (``torch._C._dynamo.guards``), the C++
  check dynamo's guards use: the bound graphs' check where the C guard is not there (the pure
  wheel) or not trusted; None where this torch lacks it (then no graph is bound).
- ``storage_use_count`` and ``storage_handle``: ``torch._C._storage_Use_Count`` on a storage's
  ``_cdata``, which tells whether the caller holds a view of an output slot (outputs.py). No
  public call says so; None: slots are never reused (a new set of outputs per call).
- ``foreach_copy``: ``torch._foreach_copy_``, one call for many copies (graph mode's copies in
  and out of 8 tensors or more); None: one ``copy_`` per tensor.
- ``addmm_activation``: ``aten._addmm_activation``, a linear's bias and GELU (tanh form) or ReLU
  in cuBLASLt's epilogue (ops.py ``addmm_activation``; the builder's
  ``kernels/linear/activation_epilogue.py``). Unchanged since torch 1.13; a package whose program
  calls it lists it among its private ops (``Manifest.private_ops``), so the torch check at load
  names it.
- ``conv_relu`` and ``conv_add_relu``: ``torch.cudnn_convolution_relu`` and
  ``cudnn_convolution_add_relu``, a convolution with its bias, ReLU and a residual in cuDNN's
  fused epilogue (ops.py ``fused_conv``; the builder's ``kernels/conv/cudnn_epilogue.py``).
  Undocumented, in torch's namespace since 1.9; a package runs on the torch releases it names.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import torch

try:
    from . import _guard
except ImportError:  # the pure wheel, or another platform or Python than the native wheel's
    _guard = None

current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)

storage_use_count = getattr(torch._C, "_storage_Use_Count", None)

foreach_copy = getattr(torch, "_foreach_copy_", None)

addmm_activation = torch.ops.aten._addmm_activation.default

conv_relu = torch.ops.aten.cudnn_convolution_relu.default

conv_add_relu = torch.ops.aten.cudnn_convolution_add_relu.default


def storage_handle(tensor: torch.Tensor) -> int:
    """The handle of ``tensor``'s storage that ``storage_use_count`` takes."""
    return tensor.untyped_storage()._cdata


# --- the C guard: torch's stable C shim on the at::Tensor inside a Python tensor ----------------

FUNCTIONS = ("data_ptr", "dim", "sizes", "strides", "dtype", "device_type", "device_index", "layout")
OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)  # after PyObject_HEAD (a reference count and a type)


@functools.cache
def shim_functions() -> tuple[int, ...] | None:
    """The addresses of torch's ``aoti_torch_get_*`` shim functions, in ``FUNCTIONS`` order."""
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        handle = ctypes.CDLL(library)  # already loaded by torch: the same handle
        return tuple(ctypes.cast(getattr(handle, f"aoti_torch_get_{name}"), ctypes.c_void_p).value
                     for name in FUNCTIONS)
    except (OSError, AttributeError):
        return None


@functools.cache
def tensors_hold_their_impl() -> bool:
    """Whether a Python tensor holds its at::Tensor (one TensorImpl pointer) at ``OFFSET``:
    read as a word and compared with ``_cdata`` on a plain tensor, a view, a parameter, an
    inference tensor and a CUDA one."""
    if torch.Tensor.__basicsize__ < OFFSET + 8 or sys.byteorder != "little":
        return False
    base = torch.zeros(4, 4)
    with torch.inference_mode():
        inference = torch.ones(3)
    samples = [base, base[1:, ::2], torch.nn.Parameter(torch.ones(2)), inference]
    if torch.cuda.is_available():
        samples.append(torch.empty(2, device="cuda"))
    return all(_guard.word_at(t, OFFSET) == t._cdata for t in samples)


def native_guard(templates: tuple, capacity: int):
    """A ``_guard.Guard`` checking inputs against ``templates`` and remembering up to
    ``capacity`` pointer sets; None where it cannot be trusted: no compiled ``_guard`` (the
    pure wheel), a torch without the shim functions, another object layout, or complex
    templates (a conjugate view is a flag the shim cannot read)."""
    if _guard is None:
        return None
    functions = shim_functions()
    if functions is None or not tensors_hold_their_impl() or any(t.is_complex() for t in templates):
        return None
    try:
        return _guard.Guard(functions, OFFSET, (torch.Tensor, torch.nn.Parameter), tuple(templates), capacity)
    except (TypeError, ValueError):  # a template the shim cannot read
        return None


# --- TensorGuards --------------------------------------------------------------------------------

def tensor_guards(templates: tuple):
    """``accepts(inputs)``: whether ``inputs`` have the dtypes, devices, shapes and strides of
    ``templates``, checked in C++ by torch's TensorGuards (tensors made under inference_mode
    carry other dispatch keys: they are checked against templates made there); None when
    this torch has no TensorGuards."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        def guard_of(tensors):
            return TensorGuards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check

        with torch.inference_mode():
            inference = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                              for t in templates)
        normal_check, inference_check = guard_of(templates), guard_of(inference)
        normal_check(*templates)
    except Exception:  # noqa: BLE001 (a torch without it, or with another signature)
        return None
    n = len(templates)

    def accepts(inputs: tuple) -> bool:
        try:
            return len(inputs) == n and (normal_check(*inputs) or inference_check(*inputs))
        except Exception:  # noqa: BLE001 (not tensors: the main path's input check names the problem)
            return False

    return accepts
