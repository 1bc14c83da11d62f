"""Graph mode without copying inputs in: the captured kernels pointed at the caller's tensors.

A user input that only the package's own kernels touch (manifest ``Input.direct``: no torch
op reads it, no output is it or a view of it, the model does not update it) need not be
copied into the graph's static input buffer. After the capture, ``Repointer.find`` walks the
graph's kernel nodes, keeps those of the package's kernels (known by their CUfunction, whose
parameter kinds the manifest gives), and notes every pointer parameter that falls inside a
direct input's static buffer, with its offset. ``point(pointers)`` then writes the caller's
data pointers (plus those offsets) into the nodes and updates the executable graph
(cuGraphExecKernelNodeSetParams): one driver call per node whose pointers changed, none when
the same tensors come again, so a serving loop passing ``static_inputs()`` pays nothing.

Static input buffers are allocated before the capture, outside the graph's memory pool,
so no other tensor of the graph can share their addresses: a pointer inside one is that
input. The caller's tensor must have the static buffer's exact strides and alignment (the
kernels were compiled for them); graph mode copies anything else in instead.
"""

from __future__ import annotations

import ctypes
import struct
from ctypes import POINTER, byref, c_int, c_size_t, c_uint, c_void_p

from . import cuda

CU_GRAPH_NODE_TYPE_KERNEL = 0


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 (CUDA >= 12.0)."""

    _fields_ = [("func", c_void_p), ("grid", c_uint * 3), ("block", c_uint * 3), ("shared", c_uint),
                ("kernel_params", POINTER(c_void_p)), ("extra", POINTER(c_void_p)), ("kern", c_void_p),
                ("ctx", c_void_p)]


_API = {
    "cuGraphGetNodes": [c_void_p, POINTER(c_void_p), POINTER(c_size_t)],
    "cuGraphNodeGetType": [c_void_p, POINTER(c_int)],
    "cuGraphKernelNodeGetParams_v2": [c_void_p, POINTER(KernelNodeParams)],
    "cuGraphExecKernelNodeSetParams_v2": [c_void_p, c_void_p, POINTER(KernelNodeParams)],
}
_functions = None


def _api():
    """The graph-node functions of the driver (CUDA >= 12.0), typed; None if it lacks them."""
    global _functions
    if _functions is None:
        lib, found = cuda._driver().lib, {}
        for name, argtypes in _API.items():
            fn = getattr(lib, name, None)
            if fn is None:
                return None
            fn.argtypes, fn.restype = argtypes, c_int
            found[name] = fn
        _functions = found
    return _functions


def _call(name: str, *args) -> None:
    cuda._driver().check(name, _api()[name](*args))


class _Node:
    """One captured launch of a package kernel: its parameters, in 8-byte slots we own."""

    def __init__(self, handle: int, params: KernelNodeParams, sizes: list[int]):
        self.handle = handle
        n = len(sizes)
        self.slots = (ctypes.c_uint64 * n)()
        for j, size in enumerate(sizes):
            value = ctypes.string_at(params.kernel_params[j], size)
            self.slots[j] = int.from_bytes(value.ljust(8, b"\0"), "little")
        self.argv = (c_void_p * n)(*[ctypes.addressof(self.slots) + 8 * j for j in range(n)])
        self.params = KernelNodeParams(params.func, params.grid, params.block, params.shared,
                                       ctypes.cast(self.argv, POINTER(c_void_p)), None, params.kern, params.ctx)


class Repointer:
    """The pointer parameters of a captured graph's kernel nodes that read direct inputs."""

    def __init__(self, exec_handle: int, nodes: list[_Node], uses: list[tuple[int, int, int, int]], static: tuple,
                 inputs: list[int], context: int):
        self._exec, self._nodes, self._uses, self._context = exec_handle, nodes, uses, context
        self.inputs = inputs  # the direct inputs: read in place (or by no kernel at all)
        self.static = self._current = static  # the static inputs' pointers: those the nodes hold now

    @classmethod
    def find(cls, graph, kernels: list, static_inputs: tuple, direct: list[int], context: int) -> Repointer | None:
        """The re-pointable uses of the ``direct`` inputs (positions) in ``graph`` (a
        torch.cuda.CUDAGraph made with keep_graph=True and instantiated, in ``context``), or
        None where the driver or torch cannot say (the caller then copies every input in)."""
        if not direct or not getattr(graph, "_keeps_graph", False) or _api() is None:
            return None
        kernels = [getattr(k, "kernel", k) for k in kernels]  # a dynamic batch's GridPerCall
        sizes = {k.function: [struct.calcsize("<" + cuda.PARAMS[p][0][0]) for p in k.params] + [8, 8]  # + scratch
                 for k in kernels}
        spans = [(i, static_inputs[i].data_ptr(), static_inputs[i].untyped_storage().nbytes()) for i in direct]
        raw = graph.raw_cuda_graph()
        count = c_size_t()
        _call("cuGraphGetNodes", c_void_p(raw), None, byref(count))
        handles = (c_void_p * count.value)()
        _call("cuGraphGetNodes", c_void_p(raw), handles, byref(count))
        nodes, uses = [], []
        for handle in handles[:count.value]:
            kind = c_int()
            _call("cuGraphNodeGetType", c_void_p(handle), byref(kind))
            if kind.value != CU_GRAPH_NODE_TYPE_KERNEL:
                continue
            params = KernelNodeParams()
            _call("cuGraphKernelNodeGetParams_v2", c_void_p(handle), byref(params))
            if params.func not in sizes:
                continue
            if not params.kernel_params:  # passed as `extra`: unreadable, so re-point none
                return None
            node = _Node(handle, params, sizes[params.func])
            found = [(len(nodes), j, i, node.slots[j] - base) for j in range(len(node.slots))
                     for i, base, nbytes in spans if base <= node.slots[j] < base + nbytes]
            if found:
                nodes.append(node)
                uses.extend(found)
        pointers = tuple(t.data_ptr() for t in static_inputs)
        return cls(graph.raw_cuda_graph_exec(), nodes, uses, pointers, list(direct), context)

    def point(self, pointers: tuple) -> None:
        """Make the graph's kernels read the direct inputs at ``pointers`` (every input's data
        pointer, by position)."""
        if pointers == self._current:
            return
        changed = set()
        for node, j, i, offset in self._uses:
            value = pointers[i] + offset
            slots = self._nodes[node].slots
            if slots[j] != value:
                slots[j] = value
                changed.add(node)
        previous = cuda.current_context()  # the driver needs the graph's context current on this thread
        if previous != self._context:
            cuda.set_current_context(self._context)
        try:
            for node in changed:
                n = self._nodes[node]
                _call("cuGraphExecKernelNodeSetParams_v2", c_void_p(self._exec), c_void_p(n.handle), byref(n.params))
        finally:
            if previous != self._context:
                cuda.set_current_context(previous)
        self._current = pointers
