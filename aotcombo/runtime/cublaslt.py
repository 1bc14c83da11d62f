"""cuBLASLt's matmul called directly, with no workspace: a 16-bit GEMM of many rows as torch's
``addmm`` / ``mm`` computes it (a bias in cuBLASLt's epilogue, float32 accumulation), in one
kernel and nothing else.

Given the workspace torch hands cuBLASLt, its heuristics pick, for large GEMMs on an H100,
persistent kernels that take their tiles from a counter in that workspace, zeroed by a memset
before every launch (``nvjet_sm90_..._coopA_bias``: every GEMM of BERT-base at 32 x 512 tokens).
In a CUDA graph each memset is a node of its own between two kernels: H100, torch 2.11, 48 a call
there, 4.5 us each of memset and gaps, 0.18 ms of a 7.2 ms call. With no workspace the heuristics
pick the same tiles scheduled statically (``..._ssched_...``), which need no counter: the GEMMs
took 4225 us a call against 4263, the gaps between kernels 34 us against 211 (CUDA graph replays
under torch's profiler, 2026-12-05). The package with this path and without it, graph mode, call by
call in turn (H100, same day): dynamic BERT-base at 32 x 512 7.294 -> 7.062 ms, 16 x 256 1.853 ->
1.800, its six smaller shapes and full-size BERT-base, ViT-B/16, GPT-2, Whisper-small's encoder and
the Llama 3.2 1B prefill within 0.5 %, every output bit for bit the same. Below ``MIN_ROWS`` rows
torch's call stays: there the heuristics picked the same kernels either way, and a split-K kernel
(few rows, long k) needs the workspace. A threshold of 1024 rows against 4096 (H100, same day,
``benchmarks/cublaslt_ab.py --compare rows``: one package loaded under each, graph mode, in turn,
ms): dynamic BERT-base 8 x 128 0.687 / 0.687, 16 x 256 1.769 / 1.769, 32 x 512 6.976 / 6.972
(torch's call 7.217); the SD 1.5 UNet (GEMMs of up to 8192 rows) 6.746 / 6.766 (torch's 6.787).

The program calls it (``ops.addmm_lt``, ``mm_lt``) only while a CUDA graph is captured: op by op
there is no graph node to save, and this Python call's host time (ctypes, sixteen arguments) would
weigh more than a memset. The library is the one torch loaded (its path from ``/proc/self/maps``);
descriptors and the algorithm are made once per shape, strides and bias and kept (``_plans``): the
heuristic's first, or the configurations it offers that ``PREFERRED`` names for the GPU's arch (a rule
measured here, no timing on the user's GPU). A call this path does not take (other dtypes, strides,
alignment, no algorithm) returns False and the caller runs torch's op.
"""

from __future__ import annotations

import ctypes
import functools
import threading

import torch

MIN_ROWS = 1024  # rows of the product (m) from which cuBLASLt is called without a workspace
ALIGN = 256  # bytes: every pointer so aligned (the heuristic's default assumption)
_DTYPES = {torch.float16: 2, torch.bfloat16: 14}  # cudaDataType
_COMPUTE_32F, _R_32F, _OP_N, _OP_T = 68, 0, 0, 1
_TRANSA, _TRANSB, _EPILOGUE, _BIAS_POINTER = 3, 4, 7, 8  # cublasLtMatmulDescAttributes_t
_EPILOGUE_DEFAULT, _EPILOGUE_BIAS = 1, 4
_PREF_MAX_WORKSPACE_BYTES = 1
_MAX_PLANS = 4096  # kept descriptors: past that many (dynamic sizes op by op) they are made again
_TILE_ID, _CUSTOM_OPTION, _CLUSTER_SHAPE_ID = 1, 5, 8  # cublasLtMatmulAlgoConfigAttributes_t
OFFERS = 12  # the heuristic's algorithms looked through for a preferred one
# By compute capability's major: (rows from, configuration) in order of preference; a GEMM of at
# least that many rows takes the first configuration the heuristic offers, else its first.
# sm_90, first: 128 x 128 tiles (CUBLASLT_MATMUL_TILE_128x128), custom option 3, clusters of 1 x 2
# (CUBLASLT_CLUSTER_SHAPE_1x2x1). H100, torch 2.11, 2026-12-05 (benchmarks/cublaslt_algos_probe.py,
# fp16, BERT-base's four linears at 1024-16384 rows, every offer timed, two rounds): offered in 7 of
# 28 cases, the fastest in all 7, 1.06-1.18x the first (FFN-up at 2048 / 4096 / 8192 rows 18.16 ->
# 15.73, 35.96 -> 30.61, 69.97 -> 59.45 us; attention output at 8192 / 16384 18.32 -> 15.82, 38.16
# -> 33.02; FFN-down 66.81 -> 63.24, 124.51 -> 116.62). Of the 14 other configurations offered in 4
# or more cases, none was the fastest in more than half of them. Again on 2026-12-06 (24 offers,
# BERT-base's, BERT-large's and Llama 3.2 1B's linears at 1024 / 1576 / 4096 / 16384 rows, 48 cases):
# offered in 16, the fastest in all 16, 1.00-1.18x the first; never offered at 1576 rows.
# sm_90, second, from 4096 rows: 256 x 128 tiles (CUBLASLT_MATMUL_TILE_256x128), custom option 7,
# clusters of 1 x 2. The same 2026-12-06 run: where the first was not offered, it was 1.004-1.048x the
# heuristic's first in all 9 cases of 4096 rows or more (BERT-base's q/k/v at 16384 rows 103.9 -> 101.3
# us, FFN-up 137.0 -> 134.9; the 1B's q/k/v 334.2 -> 318.9), 0.92x in the one below (BERT-base's q/k/v
# at 1576 rows).
PREFERRED = {9: ((0, ((_TILE_ID, ctypes.c_uint32, 20), (_CUSTOM_OPTION, ctypes.c_uint32, 3),
                      (_CLUSTER_SHAPE_ID, ctypes.c_uint16, 5))),
                 (4096, ((_TILE_ID, ctypes.c_uint32, 24), (_CUSTOM_OPTION, ctypes.c_uint32, 7),
                         (_CLUSTER_SHAPE_ID, ctypes.c_uint16, 5))))}


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_lock = threading.Lock()
_handles: dict[int, ctypes.c_void_p] = {}  # device index -> cuBLASLt handle
_plans: dict = {}


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The cuBLASLt torch loaded (its path from ``/proc/self/maps``), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "libcublasLt.so" in line})
        lib = ctypes.CDLL(paths[0]) if paths else None
    except OSError:
        return None
    if lib is not None:
        lib.cublasLtMatmul.argtypes = [ctypes.c_void_p] * 14 + [ctypes.c_size_t, ctypes.c_void_p]
    return lib


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt {what} failed with status {status}")


def _handle(lib, device: int) -> ctypes.c_void_p | None:
    """The device's handle, made here unless a CUDA graph is being captured (its making may
    allocate on the device: ``prepare`` makes it before), else None."""
    if device not in _handles:
        if torch.cuda.is_current_stream_capturing():
            return None
        handle = ctypes.c_void_p()
        with torch.cuda.device(device):
            _check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        _handles[device] = handle
    return _handles[device]


def prepare(device: torch.device) -> None:
    """The library found and ``device``'s handle made (outside a capture), once."""
    index = _index(device)
    if index not in _handles:
        with _lock:
            lib = _library()
            if lib is not None:
                _handle(lib, index)


def _drop_plans(lib) -> None:
    for plan in filter(None, _plans.values()):
        desc, *layouts, _ = plan
        for layout in layouts:
            lib.cublasLtMatrixLayoutDestroy(layout)
        lib.cublasLtMatmulDescDestroy(desc)
    _plans.clear()


def _operand(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """``t`` [r, c] as cuBLASLt's column-major operand ``t``ᵀ: (op, rows, cols, ld) of the matrix
    stored (row-major ``t`` is its transpose stored plainly; column-major, ``t`` itself), or None."""
    (r, c), (s0, s1) = t.shape, t.stride()
    if s1 == 1 and s0 >= c:
        return _OP_N, c, r, s0
    if s0 == 1 and s1 >= r:
        return _OP_T, r, c, s1
    return None


def _set(lib, desc, attribute: int, value) -> None:
    _check(lib.cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(value), ctypes.sizeof(value)),
           "cublasLtMatmulDescSetAttribute")


def _layout(lib, dtype: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
    layout = ctypes.c_void_p()
    _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, ctypes.c_uint64(rows), ctypes.c_uint64(cols),
                                          ctypes.c_int64(ld)), "cublasLtMatrixLayoutCreate")
    return layout


def _plan(lib, handle, key: tuple, preferences: tuple = ()):
    """(matmul descriptor, A, B, D layouts, algorithm) for ``key``, or None where the heuristic
    finds no algorithm that needs no workspace."""
    dtype, (op_a, a_rows, a_cols, lda), (op_b, b_rows, b_cols, ldb), (n, m, ldd), bias = key
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), _COMPUTE_32F, _R_32F), "cublasLtMatmulDescCreate")
    _set(lib, desc, _TRANSA, ctypes.c_int32(op_a))
    _set(lib, desc, _TRANSB, ctypes.c_int32(op_b))
    _set(lib, desc, _EPILOGUE, ctypes.c_uint32(_EPILOGUE_BIAS if bias else _EPILOGUE_DEFAULT))
    if bias:
        _set(lib, desc, _BIAS_POINTER, ctypes.c_void_p(bias))
    a, b, d = (_layout(lib, dtype, *shape) for shape in ((a_rows, a_cols, lda), (b_rows, b_cols, ldb), (n, m, ldd)))
    preference = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "cublasLtMatmulPreferenceCreate")
    none = ctypes.c_uint64(0)
    _check(lib.cublasLtMatmulPreferenceSetAttribute(preference, _PREF_MAX_WORKSPACE_BYTES, ctypes.byref(none),
                                                    ctypes.sizeof(none)), "cublasLtMatmulPreferenceSetAttribute")
    offers, count = (_Heuristic * OFFERS)(), ctypes.c_int(0)
    status = lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, preference, OFFERS, offers,
                                                ctypes.byref(count))
    lib.cublasLtMatmulPreferenceDestroy(preference)
    if status != 0 or count.value < 1:
        for layout in (a, b, d):
            lib.cublasLtMatrixLayoutDestroy(layout)
        lib.cublasLtMatmulDescDestroy(desc)
        return None
    return desc, a, b, d, _choice(lib, [offers[i] for i in range(count.value)], preferences)


def _preferences(major: int, rows: int) -> tuple:
    """The configurations ``PREFERRED`` names for a GEMM of ``rows`` on an arch of this major, in order."""
    return tuple(config for least, config in PREFERRED.get(major, ()) if rows >= least)


def _choice(lib, offered: list, preferences: tuple):
    """The first of ``offered`` with the first of ``preferences`` (configurations) any of them has,
    else the heuristic's first."""
    for preferred in preferences:
        for offer in offered:
            if _is_preferred(lib, offer.algo, preferred):
                return offer
    return offered[0]


def _is_preferred(lib, algo, preferred) -> bool:
    """Whether ``algo``'s configuration has every (attribute, type, value) of ``preferred``."""
    for attribute, kind, value in preferred:
        got, written = kind(), ctypes.c_size_t()
        if lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attribute, ctypes.byref(got),
                                                    ctypes.sizeof(got), ctypes.byref(written)) or got.value != value:
            return False
    return bool(preferred)


def matmul(mat1: torch.Tensor, mat2: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> bool:
    """``out = mat1 @ mat2 (+ bias)`` (2-D; ``bias`` [n], or [m, n] broadcast along m) through
    cuBLASLt with no workspace; False, having done nothing, where this path does not take it."""
    if not (out.is_cuda and out.dtype in _DTYPES and mat1.dtype == mat2.dtype == out.dtype
            and mat1.dim() == mat2.dim() == out.dim() == 2 and mat1.shape[0] >= MIN_ROWS):
        return False
    (m, k), n = mat1.shape, mat2.shape[1]
    if min(k, n) < 2 or out.shape != (m, n) or out.stride(1) != 1 or out.stride(0) < n:
        return False
    bias_ptr = 0
    if bias is not None:
        if bias.dtype != out.dtype or bias.shape[-1] != n or bias.stride(-1) != 1 or (
                bias.dim() == 2 and bias.stride(0) != 0) or bias.dim() > 2:
            return False
        bias_ptr = bias.data_ptr()
    a, b = _operand(mat2), _operand(mat1)
    if a is None or b is None or any(p % ALIGN for p in (mat1.data_ptr(), mat2.data_ptr(), out.data_ptr(), bias_ptr)):
        return False
    lib = _library()
    if lib is None:
        return False
    key = (_DTYPES[out.dtype], a, b, (n, m, out.stride(0)), bias_ptr)
    device = _index(out.device)
    with _lock:
        handle = _handle(lib, device)
        if handle is None:
            return False
        plan = _plans.get((device, key), False)
        if plan is False:
            if len(_plans) >= _MAX_PLANS:
                _drop_plans(lib)
            major = torch.cuda.get_device_capability(device)[0]
            plan = _plans[(device, key)] = _plan(lib, handle, key, _preferences(major, m))
    if plan is None:
        return False
    desc, a_layout, b_layout, d_layout, found = plan
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    stream = torch.cuda.current_stream(out.device).cuda_stream
    _check(lib.cublasLtMatmul(handle, desc, ctypes.byref(one), ctypes.c_void_p(mat2.data_ptr()), a_layout,
                              ctypes.c_void_p(mat1.data_ptr()), b_layout, ctypes.byref(zero),
                              ctypes.c_void_p(out.data_ptr()), d_layout, ctypes.c_void_p(out.data_ptr()), d_layout,
                              ctypes.byref(found.algo), None, 0, ctypes.c_void_p(stream)), "cublasLtMatmul")
    return True
