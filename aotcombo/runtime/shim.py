"""The C guard (``_guard.c``) and what it reads tensors with: torch's stable C shim.

``native_guard(templates, capacity)`` returns a ``_guard.Guard`` for tensors laid out as
``templates``, or None where it cannot be trusted: no compiled ``_guard`` (the pure wheel),
a torch without the shim functions, or a Python tensor that does not hold its ``at::Tensor``
right after its object header (checked against ``Tensor._cdata``, the TensorImpl address,
on tensors of several kinds, before the first shim call). None means the caller keeps
torch's TensorGuards, correct and slower.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import torch

FUNCTIONS = ("data_ptr", "dim", "sizes", "strides", "dtype", "device_type", "device_index", "layout")
OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)  # after PyObject_HEAD (a reference count and a type)

try:
    from . import _guard
except ImportError:  # the pure wheel, or another platform
    _guard = None


@functools.lru_cache(maxsize=None)
def shim_functions() -> tuple[int, ...] | None:
    """The addresses of torch's ``aoti_torch_get_*`` shim functions, in ``FUNCTIONS`` order."""
    library = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        handle = ctypes.CDLL(library)  # already loaded by torch: the same handle
        return tuple(ctypes.cast(getattr(handle, f"aoti_torch_get_{name}"), ctypes.c_void_p).value
                     for name in FUNCTIONS)
    except (OSError, AttributeError):
        return None


@functools.lru_cache(maxsize=None)
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
    ``capacity`` pointer sets, or None (see the module's docstring)."""
    if _guard is None:
        return None
    functions = shim_functions()
    if functions is None or not tensors_hold_their_impl() or any(t.is_complex() for t in templates):
        return None  # complex: a conjugate view is a flag the shim cannot read
    try:
        return _guard.Guard(functions, OFFSET, (torch.Tensor, torch.nn.Parameter), tuple(templates), capacity)
    except (TypeError, ValueError):  # a template the shim cannot read
        return None

