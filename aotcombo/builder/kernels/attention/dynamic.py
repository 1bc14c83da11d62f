"""A small attention with dynamic sizes: the few-token size class's (``kernels/linear/dynamic_rows``).

In a program for calls of at most ``max_tokens`` tokens, each axis (batch, sequence) is at most
that many, so a call's attention is small whatever its sizes: one kernel of ours, as a static
small attention (``lowering``'s "small" mode), with its grid fixed for the bound (a program per
(batch, head, 16 rows) up to ``max_tokens`` batches; those past the call's batch store nothing)
and the batch, the query rows, the keys and every stride that depends on the axes given at run
time (the program's sizes, ``Scalar``s). torch's fused kernel took 5 us a layer at BERT-base's
1 x 7 plus a memset, and no launch around it can start early (PDL).
"""

from __future__ import annotations

import math

from ... import graph as g
from ...codegen.render import render
from ..common import TRITON_DTYPE, cdiv
from .lowering import BLOCK_N, FP32_DOT, HEAD_DIMS, LOG2E, SMALL_KEYS, SMALL_ROWS, _broadcast_strides, _kernel

def _plain(spec: g.TensorSpec) -> bool:
    """Sizes and strides given as ints or by the program's ``Scalar``s (none as text)."""
    return isinstance(spec.storage_offset, int) and all(isinstance(v, (int, g.Ref)) for v in (*spec.shape,
                                                                                               *spec.stride))

def lowering(op: g.Extern, specs: dict, out: g.TensorSpec, max_tokens: int | None):
    """What ``small`` needs of the call ``op`` (its q, k, v, mask and group), or None when it
    stays torch's: not in a size class, other sizes than a few tokens', odd dtypes or head sizes."""
    if max_tokens is None or max_tokens > min(SMALL_ROWS, SMALL_KEYS):
        return None
    kwargs = dict(op.kwargs)
    q, k, v = (specs.get(a.name) if isinstance(a, g.Ref) else None for a in op.args[:3])
    mask = kwargs.get("attn_mask")
    mask_spec = specs.get(mask.name) if isinstance(mask, g.Ref) else None
    if None in (q, k, v) or (mask is not None and mask_spec is None) or len(q.shape) != 4 or len(out.shape) != 4:
        return None
    if not all(_plain(s) for s in (q, k, v) + ((mask_spec,) if mask_spec else ())):
        return None
    (b, h, m, d), (kv, keys) = q.shape, k.shape[1:3]
    if not (isinstance(h, int) and isinstance(kv, int) and isinstance(d, int) and d in HEAD_DIMS and h % kv == 0):
        return None
    group = h // kv if kwargs.get("enable_gqa") else 1
    if group * (m if isinstance(m, int) else max_tokens) > SMALL_ROWS or (
            keys if isinstance(keys, int) else max_tokens) > SMALL_KEYS:
        return None
    if k.shape != (b, h // group, keys, d) or v.shape != k.shape or not (q.dtype == k.dtype == v.dtype == out.dtype
                                                                       and q.dtype in TRITON_DTYPE):
        return None
    if mask_spec is not None and (mask_spec.dtype not in ("bool", q.dtype, "float32")
                                  or _broadcast_strides(mask_spec, (b, h, m, keys)) is None):
        return None
    if not written_by_output_spec(op, out):
        return None
    return {"group": group, "mask": mask_spec}

def small(op: g.Extern, specs: dict, out_name: str, found: dict, max_tokens: int) -> tuple[list, list]:
    """The ops (scalars, the output's allocation, the launch) and the kernel of one call."""
    kwargs = dict(op.kwargs)
    q_ref, k_ref, v_ref = op.args[:3]
    q, k, v, out = specs[q_ref.name], specs[k_ref.name], specs[v_ref.name], specs[out_name]
    mask, mask_spec, group = kwargs.get("attn_mask"), found["mask"], found["group"]
    (b, h, m, d), (kv, keys) = q.shape, k.shape[1:3]
    sizes = RuntimeSizes()
    batch, rows_q, n_keys = sizes.param(b, "batch"), sizes.param(m, "query_rows"), sizes.param(keys, "keys")
    strides = {label: sizes.strides(spec.stride, label) for label, spec in (("q", q), ("k", k), ("v", v))}
    if mask_spec is not None:
        strides["mask"] = sizes.strides(_broadcast_strides(mask_spec, (b, h, m, keys)), "mask")
    ops, out_spec = output_spec(out, out_name, q.shape)
    strides["out"] = sizes.strides(out_spec.stride, "out")
    params, values = sizes.params, sizes.values

    bound_rows = group * (m if isinstance(m, int) else max_tokens)
    bound_keys = keys if isinstance(keys, int) else max_tokens
    block_m, row_blocks = 16, cdiv(bound_rows, 16)
    scale = kwargs.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mask_kind = None if mask_spec is None else ("bool" if mask_spec.dtype == "bool" else "additive")
    summary = (f"[batch, {h}, queries, {d}] over as many keys, at most {max_tokens} tokens, {q.dtype}"
               + (f", {group} query heads per key/value head" if group > 1 else "")
               + (f", {mask_kind} mask" if mask_kind else ""))
    per_split = cdiv(bound_keys, BLOCK_N) * BLOCK_N
    source = render(
        "decode_attention.py.j2", part="attend", name="KERNEL", direct=True, merge_here=False, heads=kv,
        rows=rows_q if group == 1 else f"{rows_q} * {group}", group=group, query_rows=rows_q, dim=d, splits=1,
        summary=summary, out_stride=strides["out"], out_type=TRITON_DTYPE[out.dtype], row_blocks=row_blocks,
        q_stride=strides["q"], k_stride=strides["k"], v_stride=strides["v"], keys=n_keys,
        causal=bool(kwargs.get("is_causal")), keys_per_split=per_split, scale_log2=repr(scale * LOG2E),
        mask=mask_kind, mask_stride=strides.get("mask"), dot_options=FP32_DOT if q.dtype == "float32" else "",
        batch=batch if isinstance(batch, str) else None, sizes=params)
    tensors = [("q_ptr", q_ref.name, q), ("k_ptr", k_ref.name, k), ("v_ptr", v_ref.name, v)] + (
        [("mask_ptr", mask.name, mask_spec)] if mask_spec is not None else []) + [("out_ptr", out_name, out_spec)]
    grid = ((b if isinstance(b, int) else max_tokens) * kv * row_blocks, 1, 1)
    kernel, args = _kernel("attention_small", source, tensors, (("BLOCK_M", block_m), ("BLOCK_N", BLOCK_N),
                           ("BLOCK_D", d)), grid, (("m", bound_rows), ("n", bound_keys), ("d", d)),
                           writes=("out_ptr",), scalars=params)
    return ops + [g.Alloc(out_name, out_spec), g.Launch(kernel.name, args + tuple(values))], [kernel]


class RuntimeSizes:
    """The parameters a kernel takes for the sizes and strides given at run time (the
    program's ``Scalar``s), in order; an int stays a literal of the source."""

    def __init__(self):
        self.params: list[str] = []
        self.values: list = []

    def param(self, value, name: str):
        """``value`` as the kernel sees it: an int, or a parameter given the ``Scalar``'s value."""
        if isinstance(value, int):
            return value
        if name not in self.params:
            self.params.append(name)
            self.values.append(value)
        return name

    def strides(self, strides: tuple, label: str) -> tuple:
        return tuple(self.param(s, f"{label}_stride{i}") for i, s in enumerate(strides))


def written_by_output_spec(op: g.Extern, out: g.TensorSpec) -> bool:
    """Whether the call's output is in a layout ``output_spec`` writes: "bmhk" or "bhmk"
    (contiguous), its dim innermost (the trace's ``layout``: ``to_graph._dense_order``)."""
    return dict(op.kwargs).get("layout") in ("bmhk", "bhmk") and out.stride[3] == 1


def output_spec(out: g.TensorSpec, out_name: str, shape: tuple) -> tuple[list, g.TensorSpec]:
    """The attention output's spec with its sizes the call's, ``shape`` (the query's, as the
    program computes them), and the ``Scalar``s its strides need: (batch, queries, heads, dim)
    viewed as (batch, heads, queries, dim) ("bmhk", as torch's fused kernels write it) or
    contiguous, as the trace gave it (``written_by_output_spec``)."""
    b, h, m, d = shape
    ops = []
    first = g.Scalar(f"{out_name}_stride0", "mul", (m, h * d)) if not isinstance(m, int) else None
    ops += [first] if first else []
    stride0 = g.Ref(first.out) if first else m * h * d
    if (out.stride[1], out.stride[2]) == (d, h * d):
        stride = (stride0, d, h * d, 1)
    else:
        second = g.Scalar(f"{out_name}_stride1", "mul", (m, d)) if not isinstance(m, int) else None
        ops += [second] if second else []
        stride = (stride0, g.Ref(second.out) if second else m * d, d, 1)
    return ops, g.replace(out, shape=(b, h, m, d), stride=stride, storage_offset=0)
