"""Attention calls that torch's fused kernels spread over too few programs: kernels of ours.

A decode step attends with a handful of query rows per (batch, head) over thousands of
cached keys. torch's fused kernels give each (batch, head) one program that walks every key:
at batch 1 with 4 key/value heads, cuDNN's attention kept 4 of an H100's 132 SMs busy for
~32 us per layer, the largest item of the step (``benchmarks/llm_bench.py --profile``).
``lower`` replaces each such call with two kernels of ours, flash-decoding's split
(``templates/decode_attention.py.j2``): ``splits`` programs per (batch, head) each take a
slice of the keys and leave a partial output with its row maxima and sums in float32; one
program per (batch, head, query row) merges them into the output, in the layout the program
reads it through. With a mask, each program first finds the first and last key its rows may
see and reads only those (a decode row of a static cache: the positions written so far, each
row its own; exact for any mask, as a key none may see adds nothing). A small attention
(at most ``SMALL_ROWS`` queries and ``SMALL_KEYS`` keys, causal or not, e.g. a short
sequence's block) is one kernel of ours: one program per (batch, head, 16 query rows) over
all its keys, writing the output itself (torch's memory-efficient kernel took 8 us for a
float32 [2, 8, 64, 32] block). An unmasked prefill of at most ``PREFILL_KEYS`` keys (ViT's, or
GPT-2's causal one: each program then stops at its last row's key) is that kernel with
``PREFILL_ROWS`` query rows a program. Sizes and strides are fixed at build
time; the split is chosen so one call has about ``TARGET_PROGRAMS`` programs. A prefill under
a key mask (an encoder's padding), with sizes fixed or dynamic, is ``prefill.py``'s. Calls that
fit none (a long prefill, masks other than a key mask, odd head sizes) stay torch's.
Grouped-query attention (``enable_gqa``, made by ``trace/grouped_heads.py`` from transformers'
``repeat_kv``): a program takes one key/value head and the rows of all its query heads, so each
key/value head is read once for its group and never copied per query head.
"""

from __future__ import annotations

import hashlib
import math

import torch

from ....runtime.manifest import ITEMSIZE
from ... import graph as g
from ...codegen.render import render
from ...graph import ATTENTION
from ..common import POINTER_TYPE, TRITON_DTYPE, cdiv, next_power_of_2

MAX_ROWS = 32  # query rows per (batch, head) of a split call: more is a prefill, which torch's kernels do well
MIN_KEYS = 256  # keys of a split call: fewer, one program per (batch, head) walks them quickly enough
SMALL_ROWS, SMALL_KEYS = 64, 128  # a small attention: one kernel, a program per (batch, head, 16 rows)
# A prefill without a mask (16-bit, head size 64, no grouped heads) of at most PREFILL_KEYS keys
# (ViT's): the small attention's kernel, PREFILL_ROWS query rows a program, 3 stages. H100: ViT-B/16
# at batch 8 (197 keys) 0.973-0.997 -> 0.911 ms a call against cuDNN's (two A/B rounds). Causal
# (GPT-2 small's 4 x 256 tokens), each program's keys up to its last row: H200, torch 2.11, the
# package before and after in turn in one process, 766.0 -> 736.3 us a call (cuDNN's attention 6.1 us
# and a memset a layer before), GPU kernels a forward 99 -> 87.
# With a mask the kernel lost to cuDNN (BERT-base's 8 x 383 1.67 -> 2.35 ms, 32 x 512
# 8.2 -> 10.8; alone, key-padding masks at 32 x 512: 317-319 against 108 us), though a kernel of the
# same loop's algorithm skipping the padded key blocks beat it 1.29x there
# (benchmarks/prefill_attention_bench.py): masked calls stay torch's.
PREFILL_KEYS, PREFILL_HEAD_DIM, PREFILL_ROWS = 256, 64, 64
PREFILL_DTYPES, PREFILL_STAGES = ("float16", "bfloat16"), 3
BLOCK_N = 64  # keys per step of a split program
# About eight programs an SM of an H100 (132 SMs): a program holds 168 registers a thread at
# most (three to an SM), and with fewer, longer programs the slowest ones set the time. Llama 3
# 8B's decode step for eight sequences at eight positions (benchmarks/llm_batch_bench.py, H100):
# 256 programs of four key blocks each took 52 us a layer (ncu: 9 % occupancy, 0.65 waves, the
# SMs idle 57 % of the kernel), the step 8.51 ms; 1024 programs of one block, 6.87 ms. A batch
# of one with 8 key/value heads gets the same split either way (one block a program).
TARGET_PROGRAMS = 1024
MAX_SPLITS = 64  # the combine kernel holds every split's partial row at once
# Tried, not kept: the split kernel's last program of each (batch, key/value head), counted in
# by an atomic, merging the partials itself (no combine launch; one memset of the counters a
# step). H200, Llama 3.2 1B decode (quantized_llm_bench.py, both packages in one run, positions
# 5 / 1000, 2026-12-02): bf16 0.864 / 0.875 -> 0.911 / 0.924 ms, int8 0.630 / 0.641 -> 0.676 /
# 0.689, int4 0.643 / 0.655 -> 0.691 / 0.704: the one late program's merge costs more than the
# launch (1.4 us) it saves.
HEAD_DIMS = (16, 32, 64, 128, 256)
FP32_DOT = ', input_precision="tf32x3"'  # float32 products as three tf32 ones, as the fused linears do
LOG2E = 1.4426950408889634




def _ints(spec: g.TensorSpec) -> bool:
    return all(isinstance(v, int) for v in (*spec.shape, *spec.stride, spec.storage_offset))


def _broadcast_strides(spec: g.TensorSpec, shape: tuple) -> tuple | None:
    """``spec``'s strides broadcast to ``shape`` (0 along its size-1 dims), or None when its
    shape does not broadcast there."""
    if len(spec.shape) != len(shape):
        return None
    if any(s not in (1, n) for s, n in zip(spec.shape, shape)):
        return None
    return tuple(0 if s == 1 and n != 1 else t for s, n, t in zip(spec.shape, shape, spec.stride))


def lowering(op: g.Extern, specs: dict, out: g.TensorSpec) -> str | None:
    """How the attention call ``op`` (its output ``out``) is lowered: "split" (two kernels),
    "small" (one), or None (it stays torch's). With ``enable_gqa``, key/value head ``h //
    group`` serves query head ``h`` (``trace/grouped_heads.py`` makes such calls)."""
    kwargs = dict(op.kwargs)
    q, k, v = (specs.get(a.name) if isinstance(a, g.Ref) else None for a in op.args[:3])
    mask = kwargs.get("attn_mask")
    mask_spec = specs.get(mask.name) if isinstance(mask, g.Ref) else None
    if None in (q, k, v) or (mask is not None and mask_spec is None):
        return None
    if not all(_ints(s) and len(s.shape) == 4 for s in (q, k, v, out)):
        return None
    (b, h, m, d), (kv, s) = q.shape, k.shape[1:3]
    group = h // kv if kwargs.get("enable_gqa") and h % kv == 0 else 1
    if k.shape != (b, h // group, s, d) or v.shape != k.shape or out.shape != (b, h, m, d):
        return None
    if not (q.dtype == k.dtype == v.dtype == out.dtype and q.dtype in TRITON_DTYPE and d in HEAD_DIMS):
        return None
    if mask_spec is not None:
        if not _ints(mask_spec) or _broadcast_strides(mask_spec, (b, h, m, s)) is None:
            return None
        if mask_spec.dtype not in ("bool", q.dtype, "float32"):
            return None
    return _mode(m, s, group, bool(kwargs.get("is_causal")), _prefill_kind(q.dtype, d, mask_spec is not None))


def _prefill_kind(dtype: str, head_dim: int, masked: bool) -> bool:
    """Whether a call of these may be a prefill of ours (its sizes aside)."""
    return dtype in PREFILL_DTYPES and head_dim == PREFILL_HEAD_DIM and not masked


def _mode(rows: int, keys: int, group: int, causal: bool, prefill: bool = False) -> str | None:
    """The lowering of a call of ``rows`` query rows per head over ``keys`` keys, ``group``
    query heads per key/value head (a split program holds the ``rows * group`` rows of its
    key/value head); ``prefill``: its dtype, head size and absent mask are a prefill kernel's."""
    if rows <= SMALL_ROWS and keys <= SMALL_KEYS:
        return "small"
    # grouped: whatever the keys, as torch's alternative would be its enable_gqa (math, at times)
    if rows * group <= MAX_ROWS and (keys >= MIN_KEYS or group > 1) and not causal:
        return "split"
    if prefill and keys <= PREFILL_KEYS and group == 1:
        return "prefill"
    return None


def takes(dtype: torch.dtype, query_shape: tuple, keys: int, group: int, causal: bool,
         mask_dtype: torch.dtype | None) -> bool:
    """Whether ``lowering`` takes a call of these, ``group`` query heads per key/value head
    (the trace asks before it rewrites a call: ``grouped_heads.py``, ``attention_masks.py``)."""
    name, mask_name = (str(t).removeprefix("torch.") if t is not None else None for t in (dtype, mask_dtype))
    return (name in TRITON_DTYPE and query_shape[3] in HEAD_DIMS and mask_name in (None, "bool", name, "float32")
            and _mode(query_shape[2], keys, group, causal, _prefill_kind(name, query_shape[3], mask_name is not None))
            is not None)


def split_of(batch_heads: int, keys: int) -> tuple[int, int]:
    """(splits, keys per split): about ``TARGET_PROGRAMS`` programs, each a whole number of ``BLOCK_N`` key steps."""
    steps = cdiv(keys, BLOCK_N)
    splits = min(steps, MAX_SPLITS, max(1, cdiv(TARGET_PROGRAMS, batch_heads)))
    per_split = cdiv(steps, splits) * BLOCK_N
    return cdiv(keys, per_split), per_split


def _aligned(spec: g.TensorSpec) -> bool:
    return spec.storage_offset * ITEMSIZE[spec.dtype] % 16 == 0


def lowered_ops(op: g.Extern, specs: dict, out_name: str, mode: str, rope: dict | None = None
                ) -> tuple[list, list, dict]:
    """What replaces one attention call: its ops (scratch and output allocations, launches),
    the kernels they launch, and the specs of the scratch buffers. ``rope``: the call's query
    rotated and the new key and value written into the cache (k, v) first, its inputs and
    template strides (``rope_fold.as_attention``)."""

    kwargs = dict(op.kwargs)
    q_ref, k_ref, v_ref = op.args[:3]
    q, k, v, out = specs[q_ref.name], specs[k_ref.name], specs[v_ref.name], specs[out_name]
    mask = kwargs.get("attn_mask")
    mask_spec = specs[mask.name] if mask is not None else None
    (b, h, m, d), (kv, keys) = q.shape, k.shape[1:3]
    group = h // kv  # query heads per key/value head: a program takes a key/value head's rows of all of them
    rows = group * m
    splits, per_split = split_of(b * kv, keys) if mode == "split" else (1, cdiv(keys, BLOCK_N) * BLOCK_N)
    scale = kwargs.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mask_kind = None if mask_spec is None else ("bool" if mask_spec.dtype == "bool" else "additive")
    causal = bool(kwargs.get("is_causal"))
    # a split program takes every row; a small attention's programs take 16 rows each (more
    # programs: a [2, 8, 64, 32] block ran in 16 of them); a prefill's, PREFILL_ROWS
    block_m = max(16, next_power_of_2(rows)) if mode == "split" else PREFILL_ROWS if mode == "prefill" else 16
    block_d, row_blocks = d, cdiv(rows, block_m)
    summary = (f"[{b}, {h}, {m}, {d}] queries over {keys} keys, {q.dtype}" + (", causal" if causal else "")
               + (f", {group} query heads per key/value head" if group > 1 else "")
               + (f", {mask_kind} mask" if mask_kind else "")
               + (f"; {splits} splits of {per_split} keys" if mode == "split" else f"; {row_blocks} programs per head"))
    common = dict(heads=kv, rows=rows, group=group, query_rows=m, dim=d, splits=splits, summary=summary,
                  out_stride=out.stride, out_type=TRITON_DTYPE[out.dtype])
    attend = dict(common, row_blocks=row_blocks, q_stride=q.stride, k_stride=k.stride, v_stride=v.stride, keys=keys,
                  causal=causal, keys_per_split=per_split, scale_log2=repr(scale * LOG2E), mask=mask_kind,
                  mask_stride=_broadcast_strides(mask_spec, (b, h, m, keys)) if mask_spec else None,
                  dot_options=FP32_DOT if q.dtype == "float32" else "")
    source = render("decode_attention.py.j2", part="attend", name="KERNEL", direct=mode != "split",
                    rope=rope["strides"] if rope else None, **attend)
    inputs = [(p, n, s) for p, (n, s) in zip(["q_ptr", "k_ptr", "v_ptr", "mask_ptr"], [
        (q_ref.name, q), (k_ref.name, k), (v_ref.name, v)] + ([(mask.name, mask_spec)] if mask_spec else []))]
    inputs += rope["inputs"] if rope else []
    cache = ("k_ptr", "v_ptr") if rope else ()  # written by the attend kernel
    tiles = (("BLOCK_M", block_m), ("BLOCK_N", BLOCK_N), ("BLOCK_D", block_d))
    numels = (("m", rows), ("n", keys), ("d", d))
    if mode != "split":
        kernel, args = _kernel(f"attention_{mode}", source, inputs + [("out_ptr", out_name, out)], tiles,
                               (b * kv * row_blocks, 1, 1), numels, writes=("out_ptr", *cache),
                               num_stages=PREFILL_STAGES if mode == "prefill" else 2)
        return [g.Alloc(out_name, out), g.Launch(kernel.name, args)], [kernel], {}
    scratch = {f"{out_name}_partial": g.TensorSpec((b * kv * splits * rows * d,), (1,), "float32"),
               f"{out_name}_stats": g.TensorSpec((b * kv * splits * rows * 2,), (1,), "float32")}
    (acc, acc_spec), (stats, stats_spec) = scratch.items()
    split, split_args = _kernel("decode_attention_split", source,
                                inputs + [("acc_ptr", acc, acc_spec), ("stats_ptr", stats, stats_spec)], tiles,
                                (b * kv * splits, 1, 1), numels, writes=("acc_ptr", "stats_ptr", *cache))
    combine_source = render("decode_attention.py.j2", part="combine", name="KERNEL", **common)
    combine, combine_args = _kernel(
        "decode_attention_combine", combine_source,
        [("acc_ptr", acc, acc_spec), ("stats_ptr", stats, stats_spec), ("out_ptr", out_name, out)],
        (("BLOCK_S", max(2, next_power_of_2(splits))), ("BLOCK_D", block_d)), (b * kv * rows, 1, 1),
        (("m", rows), ("d", d)), writes=("out_ptr",))
    ops = [g.Alloc(acc, acc_spec), g.Alloc(stats, stats_spec), g.Launch(split.name, split_args),
           g.Alloc(out_name, out), g.Launch(combine.name, combine_args)]
    return ops, [split, combine], scratch


def _kernel(prefix: str, source: str, params: list, tiles: tuple, grid: tuple, numels: tuple, writes: tuple,
            scalars: tuple = (), num_stages: int = 2):
    """The ``g.Kernel`` of ``source`` and its launch's tensor arguments: ``params`` (param, value,
    spec) its tensors, ``scalars`` its int params after them (sizes given at run time)."""
    name = f"{prefix}_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    kernel = g.Kernel(
        name=name, source=source.replace("def KERNEL(", f"def {name}(", 1), heuristic="attention",
        signature=tuple((p, POINTER_TYPE[s.dtype]) for p, _, s in params) + tuple((p, "i32") for p in scalars)
        + tuple((t, "constexpr") for t, _ in tiles),
        constants=(), divisible_by_16=tuple(p for p, _, s in params if _aligned(s)), numels=numels,
        reduction_hint=None, mutated=writes, family="decode_attention", tiles=tiles, grid=grid, num_warps=4,
        num_stages=num_stages)
    return kernel, tuple(g.Ref(n) for _, n, _ in params)


def lower(graph: g.Graph, max_tokens: int | None = None) -> g.Graph:
    """``graph`` with every attention call that has a ``lowering`` replaced by its kernels (in a
    size class of at most ``max_tokens`` tokens, with dynamic sizes: ``dynamic.small``; a prefill
    under a key mask: ``prefill.lowered``)."""
    from ...sizes import at_most
    from . import dynamic, prefill, rope_fold

    specs = graph.spec
    # sizes as the program computes them (its Scalars), where graph.spec has their text
    traced = specs | {op.out: op.spec for op in graph.ops if isinstance(op, (g.View, g.Alloc))}
    getitems: dict[str, list] = {}
    for op in graph.ops:
        if isinstance(op, g.GetItem):
            getitems.setdefault(op.base, []).append(op)
    lowered: dict[str, tuple[str, str]] = {}  # the call's tuple -> (its output tensor, the lowering)
    ropes = {}  # a folded call's output -> (the attention it makes, its rope)
    for op in graph.ops:
        if isinstance(op, g.Extern) and op.op == rope_fold.LOWERED_OP:
            call, rows, rope = rope_fold.as_attention(op, specs)
            mode = lowering(call, specs | rows, specs[op.out])
            if mode not in ("split", "small"):  # fold() takes only calls lowered so: a bug if not
                raise ValueError(f"{op.out}: a folded decode attention lowered as {mode}")
            lowered[op.out], ropes[op.out] = (op.out, mode), (call, rows, rope)
        elif isinstance(op, g.Extern) and op.op == ATTENTION and op.out is not None:
            items = getitems.get(op.out, [])
            if len(items) == 1 and items[0].index == 0:
                mode = lowering(op, specs, specs[items[0].out])
                found = mode is None and dynamic.lowering(op, traced, specs[items[0].out], max_tokens)
                if mode is None and not found and prefill.lowering(op, traced, specs[items[0].out]):
                    mode = "masked_prefill"
                if mode is not None or found:
                    lowered[op.out] = (items[0].out, mode or found)
    if not lowered:
        return graph
    kernels = {k.name: k for k in graph.kernels}
    if any(mode == "masked_prefill" for _, mode in lowered.values()):  # its grids' bounds, computed once
        largest, scalars = at_most(graph), {op.out: op for op in graph.ops if isinstance(op, g.Scalar)}
    ops, new_specs = [], dict(graph.specs)
    for op in graph.ops:
        if isinstance(op, g.GetItem) and op.base in lowered:
            continue
        if not (isinstance(op, g.Extern) and op.out in lowered):
            ops.append(op)
            continue
        out_name, mode = lowered[op.out]
        if isinstance(mode, dict):  # a size class's small attention, its sizes given at run time
            (replacement, made), scratch = dynamic.small(op, traced, out_name, mode, max_tokens), {}
        elif mode == "masked_prefill":
            (replacement, made), scratch = prefill.lowered(op, traced, out_name, largest, scalars), {}
        elif op.out in ropes:
            call, rows, rope = ropes[op.out]
            replacement, made, scratch = lowered_ops(call, specs | new_specs | rows, out_name, mode, rope)
        else:
            replacement, made, scratch = lowered_ops(op, specs | new_specs, out_name, mode)
        for kernel in made:
            kernels.setdefault(kernel.name, kernel)
        new_specs.update(scratch)
        ops += replacement
    return g.replace(graph, ops=tuple(ops), kernels=tuple(kernels.values()), specs=tuple(new_specs.items()))
