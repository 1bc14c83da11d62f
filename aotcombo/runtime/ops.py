"""Public-API stand-ins for the private ops Inductor calls, so a package runs on every torch
its wheel admits.

Inductor lowers ``F.scaled_dot_product_attention`` to private ATen ops
(``_scaled_dot_product_efficient_attention``, ``..._flash_attention``) whose contracts move
between releases: torch 2.14 takes a boolean ``attn_bias`` that 2.11 refuses. The public
function makes the same call after doing what the private ops leave to their callers
(boolean masks to additive ones, padding, broadcasting), so the program calls it instead,
and lets torch choose the fused backend at run time, as eager does (on an H100 with torch
2.11, cuDNN's attention for a bf16 decode step: 33 us against 118 us for the memory-efficient
kernel the trace had named). Calls of a few query rows over many keys (a decode step) are
kernels of the package instead (builder/kernels/attention/).

The program's later kernels read the output through the strides the trace gave it, so the
result is returned in exactly that layout, named by its dims' order (b, h, m, k), outermost first:
``"bmhk"``, a (batch, queries, heads, dim) buffer viewed as (batch, heads, queries, dim), as the
fused kernels write it, ``"bhmk"`` (contiguous), or another (flash attention's output follows its
query's layout: ``"mbhk"`` under ``nn.MultiheadAttention``). A result in another layout is copied.
``in_strides`` does the same for every other op that returns a new tensor (a convolution's,
whose layout the backend picks at run time).

``all_reduce_`` runs torch's functional ``all_reduce_`` (a tensor-parallel program's) as c10d's
synchronous all-reduce: since torch 2.8 NCCL runs that on the current stream, where the
functional op runs it on the process group's own stream and joins back through two events
(two edges across streams per collective in a CUDA graph). Tried, not kept: torch's
symmetric-memory one-shot all-reduce (``symm_mem.one_shot_all_reduce_copy_out``, one kernel
reading the other rank's copy over NVLink) for the decode step's all-reduces: Llama 3 8B at
TP 2 on two H100s 3.981 ms a step against NCCL's 3.974 (2026-11-27), outputs within tolerance.

``addmm_activation`` is ``aten._addmm_activation``, a linear with its bias and activation in
cuBLASLt's epilogue, where CUDA's kernel takes GELU's tanh form; on the CPU (the build's
interpreter) torch's kernel takes GELU's exact form, so there it is computed as CUDA does.

``addmm_lt`` and ``mm_lt`` are ``aten``'s; captured into a CUDA graph, a 16-bit GEMM of many rows run by
cuBLASLt with no workspace (``cublaslt.py``: no memset node beside it in the graph).

``fused_conv`` is a convolution with its bias, a residual and ReLU after it, the builder's
``aotcombo::fused_conv`` (BatchNorm folded into the weights at load): with ReLU on CUDA one cuDNN
call (``cudnn_convolution_relu``, ``..._add_relu``) whose epilogue adds the bias and the residual,
in place of the convolution and a kernel that reads and writes its output again; anywhere else
the same in three steps. Its output is always channels last, as the trace planned it.

``placed_root`` allocates a buffer whose view is an output around that output's tensor in its
output slot (outputs.py), so that the program writes the output in place.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from . import cublaslt
from .outputs import span_of
from .torch_private import addmm_activation as _addmm_activation, conv_add_relu, conv_relu

_fresh = threading.local()


@contextlib.contextmanager
def fresh_shapes():
    """Attention in this block leaves cuDNN's backend out: it builds an execution plan at each
    shape it has not seen (38-82 ms at BERT-base's on an H200, against 0.1-6.5 ms for the
    memory-efficient kernel's first call: benchmarks/attention_backends.py). Graph mode with
    dynamic axes runs a size's calls before its capture in here; the capture and its replays
    use the fastest backend (cuDNN's there: 0.40x the efficient kernel's time at 32 x 512)."""
    before = getattr(_fresh, "on", False)
    _fresh.on = True
    try:
        yield
    finally:
        _fresh.on = before


def attention(query, key, value, *, layout: str, attn_mask=None, is_causal: bool = False,
              scale: float | None = None, enable_gqa: bool = False) -> tuple[torch.Tensor]:
    """``F.scaled_dot_product_attention``, its output in ``layout``; a 1-tuple, as the
    private ops' first output."""
    with _no_plans() if getattr(_fresh, "on", False) else contextlib.nullcontext():
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
            **({"enable_gqa": True} if enable_gqa else {}))
    return (in_layout(out, layout),)


def _no_plans():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def addmm_activation(bias, x, w, *, use_gelu: bool = False) -> torch.Tensor:
    """``act(bias + x @ w)``, ``act`` GELU's tanh form (``use_gelu``) or ReLU, as CUDA computes it."""
    if x.is_cuda:
        return _addmm_activation(bias, x, w, use_gelu=use_gelu)
    out = torch.addmm(bias, x, w)
    return torch.nn.functional.gelu(out, approximate="tanh") if use_gelu else torch.relu(out)


def _by_cublaslt(mat1, mat2, bias, out) -> bool:
    """Whether cuBLASLt ran ``out = mat1 @ mat2 (+ bias)``: only while a CUDA graph is captured, where
    a memset is a node of its own (op by op this Python call's host time, ctypes and all, would
    cost more than it saves). Op by op (a graph's warm-up run too) its handle is made, outside any
    capture."""
    if not out.is_cuda:
        return False
    if not torch.cuda.is_current_stream_capturing():
        cublaslt.prepare(out.device)
        return False
    return cublaslt.matmul(mat1, mat2, bias, out)


def addmm_lt(bias, mat1, mat2, *, alpha=1, beta=1, out) -> torch.Tensor:
    """``aten.addmm.out``; captured into a CUDA graph, a 16-bit GEMM of many rows through cuBLASLt with
    no workspace (no memset beside it: ``cublaslt.py``)."""
    if not (alpha == 1 and beta == 1 and _by_cublaslt(mat1, mat2, bias, out)):
        torch.ops.aten.addmm.out(bias, mat1, mat2, alpha=alpha, beta=beta, out=out)
    return out


def mm_lt(mat1, mat2, *, out) -> torch.Tensor:
    """``aten.mm.out``, as ``addmm_lt`` with no bias."""
    if not _by_cublaslt(mat1, mat2, None, out):
        torch.ops.aten.mm.out(mat1, mat2, out=out)
    return out


def fused_conv(x, weight, bias, residual, stride, padding, dilation, groups: int, relu: bool) -> torch.Tensor:
    """``relu?(conv2d(x, weight) + bias + residual)``, channels last (``bias``, ``residual``: None or not)."""
    x = x.contiguous(memory_format=torch.channels_last)  # no copy: the program hands it over channels last
    if x.is_cuda and relu and residual is None:
        out = conv_relu(x, weight, bias, stride, padding, dilation, groups)
    elif x.is_cuda and relu:
        out = conv_add_relu(x, weight, residual, 1.0, bias, stride, padding, dilation, groups)
    else:
        out = torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation, groups)
        if residual is not None:
            out = out + residual
        if relu:
            out = torch.relu(out)
    return out.contiguous(memory_format=torch.channels_last)


def in_layout(out: torch.Tensor, layout: str) -> torch.Tensor:
    """``out`` (batch, heads, queries, dim) with the strides of a dense buffer of its dims in
    ``layout``'s order, outermost first (their letters b, h, m, k: "bhmk" is contiguous), copied
    only when it has others."""
    size, stride = dict(zip("bhmk", out.shape)), {}
    inner = 1
    for dim in reversed(layout):
        stride[dim], inner = inner, inner * size[dim]
    return in_strides(out, tuple(stride[d] for d in "bhmk"))


def placed_root(out, index: int, shape, stride, offset, view_stride, dtype, device) -> torch.Tensor:
    """For a program whose output ``index`` is the view at ``offset`` (strides ``view_stride``) of a
    buffer it allocates (``shape``, ``stride``): that buffer, in ``out[index]``'s slot, around it,
    where the slot holds exactly that region for it (``Slot.rooms``); else a new one (``out``
    None, or not a slot: the program's own, its output copied out by the caller)."""
    rooms = getattr(out, "rooms", ())
    if index < len(rooms) and rooms[index] == (offset, span_of(shape, stride)):
        t = out[index]
        if tuple(t.stride()) == tuple(view_stride) and t.dtype == dtype:
            return t.as_strided(shape, stride, t.storage_offset() - offset)
    return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def in_strides(out: torch.Tensor, stride: tuple) -> torch.Tensor:
    """``out``, a new tensor an op returned, with the strides the trace planned for it (the
    program's kernels read it through them), copied only when the backend chose others."""
    if all(n == 1 or s == t for n, s, t in zip(out.shape, out.stride(), stride)):  # size-1 dims: any stride
        return out
    return torch.empty_strided(out.shape, stride, dtype=out.dtype, device=out.device).copy_(out)


_REDUCE_OPS = {"sum": "SUM", "avg": "AVG", "product": "PRODUCT", "min": "MIN", "max": "MAX"}


def all_reduce_(tensor: torch.Tensor, reduce_op: str, group: str) -> torch.Tensor:
    """``_c10d_functional.all_reduce_(tensor, reduce_op, group)``, in place, over the default
    process group (the package's: ``group`` is its name, as the loader passes it), on the current
    stream. The ``wait_tensor`` the program makes after it finds no work pending and returns."""
    import torch.distributed as dist

    world = dist.group.WORLD
    if world is None or world.group_name != group:
        raise RuntimeError(f"the package's collectives run over the default process group; given {group!r}")
    dist.all_reduce(tensor, op=getattr(dist.ReduceOp, _REDUCE_OPS[reduce_op]), group=world)
    return tensor
