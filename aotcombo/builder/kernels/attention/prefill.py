"""A masked prefill's attention: flash attention's forward of ours, skipping the padded keys.

An encoder's batch of padded sequences (BERT-base's, through transformers) attends under a key
mask: each batch's row of keys, the same for every head and query row (``trace/mask_rows.py``
proves it and hands the call that row alone, [batch, 1, 1, keys]). torch's fused kernels read every key
of every batch, padding too, and the mask as a [batch, 1, queries, keys] tensor. This kernel
(``templates/prefill_attention.py.j2``) reads the mask a key at a time and only the key blocks
from the first to the last key its batch may see. H100, fp16, BERT-base's shapes with every
other batch padded by half (``benchmarks/prefill_attention_bench.py``, the same algorithm):
1.29x cuDNN's attention at 32 x 512, 2.45x at 8 x 383, 1.19x at 16 x 256, 1.12x at 8 x 128 with
64-key steps (1.48x at 32 x 512 with 32-key ones); without the skip 0.95x at 32 x 512, so unmasked
long calls stay torch's.

Sizes fixed at build time, or in a program for dynamic axes (not a size class) given at run
time with the grid computed per call (``xnumel`` programs): a dynamic BERT-base's calls of 9 to
32 x 512 tokens run here, not on cuDNN.
"""

from __future__ import annotations

import math

from ... import graph as g
from ...codegen.render import render
from ..common import TRITON_DTYPE, cdiv
from .dynamic import RuntimeSizes, output_spec, written_by_output_spec
from .lowering import LOG2E, _broadcast_strides, _kernel

DTYPES, HEAD_DIMS = ("float16", "bfloat16"), (64,)
BLOCK_N, STAGES = 32, 3  # 4 warps, as every attention kernel of ours
# Tiles: 64 query rows a program, 32 keys a step; a bool mask's visible keys found one run (a padding
# mask's), blocks inside it skip the mask (the template). Timed as packages run them, compiled by the
# build's Triton (3.8) and launched as cubins (benchmarks/attention_cubin_probe.py, H100, us,
# 2026-12-06): 64 rows with the run's unmasked blocks (two machines) / 64 rows / 128 rows (four
# machines): 32 x 512 67.4-67.9 / 70.3-73.0 / 69.2-72.2, 16 x 256 16.4-16.5 / 16.4-17.3 / 17.2-18.1,
# 8 x 383 16.7-16.8 / 17.3-18.4 / 20.8-21.5, 8 x 128 5.3 / 5.3-5.6 / 6.2-6.5, 4 x 129 5.5-5.7 / 5.5-5.7 /
# 6.8-7.1, 1 x 128 4.2-4.3 / 4.3-4.5 / 5.9-6.1; 128 rows with the unmasked blocks 68.5 at 32 x 512. At
# 128 rows the kernel holds 168 registers a thread (3 programs an SM), at 64 92-95 (5). Before, 128
# rows took calls of 256 programs or more and every call for dynamic axes, a rule measured with the
# GPU's own Triton (3.6); there the unmasked blocks had measured slower (below). Not kept (the probe,
# H100): capped registers (spills), the next block's q.k issued before this block's softmax, 2 or 4
# blocks of 64 rows a program after one pass over the mask, 16-key steps, 2 or 4 stages, 8 warps, the
# mask's run found but every block masked by index (77.8 at 32 x 512), a row's maximum left stale
# while it grows by at most 8 (log2) so that blocks skip the rescale (94.2: the test is a block-wide
# reduction and a branch around the product). Whole dynamic BERT-base at 32 x 512 (H100, axes_bench, two
# machines, not in turn): 6.889 ms a call with 128 rows as the kernel was, 6.871 with this.
# Earlier sweeps (the GPU's Triton, 3.6; benchmarks/prefill_attention_bench.py, us): 32 x 512 65.8 at
# 128 x 32, 87.8 at 128 x 64, 98.3 at 64 x 64, 116 at 128 x 128 (8 warps), TMA 100.5; 128 x 32 at 2 / 4
# stages 72.9 / 66.3, 8 warps 78.5, 256 x 32 / 64 (8 warps) 89.2 / 96.9, 128 x 16 93.5; the first pass
# 256 keys a step 63.7 against 65.6. Tried, not kept (H200, Triton 3.6, us at 32 x 512 / 16 x 256 /
# 8 x 383; 2026-11-29): as then 66.7 / 14.4 / 17.0; where a batch's visible keys are one run, a loop
# masking only its ends 71.8 / 15.8 / 18.5; warp-specialized loops (``tl.range(warp_specialize=True)``)
# 128 x 64 at 8 warps 80.1 / 17.3 / 17.2, 4 warps 88.1 / 18.8 / 17.5, and at 128 x 32 Triton fails to
# compile them. H100, 2026-12-06 (benchmarks/masked_prefill_probe.py, us at 32 x 512): each batch's key
# range found once a call by a kernel of its own (3.8) instead of in every program 74.7 against 70.5,
# with the batches taken longest first 69.5; torch's flash attention reading each batch's visible keys
# (``seqused_k``) 86.3.
ROWS = 64


def key_mask_strides(mask: g.TensorSpec, shape: tuple) -> tuple | None:
    """(batch stride, key stride) of a mask of the call of ``shape`` (batch, heads, queries, keys)
    that is one row of keys per batch (broadcast over heads and query rows), else None."""
    strides = _broadcast_strides(mask, shape)
    if strides is None or strides[1] != 0 or strides[2] != 0:
        return None
    return strides[0], strides[3]


def takes(dtype: str, head_dim: int, group: int, causal: bool, mask_kind: str | None, key_mask: bool) -> bool:
    """Whether a call of these is a masked prefill of ours (whatever its sizes)."""
    return (dtype in DTYPES and head_dim in HEAD_DIMS and group == 1 and not causal and key_mask
            and mask_kind in ("bool", dtype, "float32"))


def lowering(op: g.Extern, specs: dict, out: g.TensorSpec) -> bool:
    """Whether this kernel takes the attention call ``op`` (its output ``out``), with sizes
    fixed or given at run time."""
    kwargs = dict(op.kwargs)
    q, k, v = (specs.get(a.name) if isinstance(a, g.Ref) else None for a in op.args[:3])
    mask = kwargs.get("attn_mask")
    mask_spec = specs.get(mask.name) if isinstance(mask, g.Ref) else None
    if None in (q, k, v, mask_spec) or not all(len(s.shape) == 4 for s in (q, k, v, out)):
        return False
    if not all(isinstance(s.storage_offset, int) and all(isinstance(x, (int, g.Ref)) for x in (*s.shape, *s.stride))
               for s in (q, k, v, mask_spec)):
        return False
    (b, h, m, d), keys = q.shape, k.shape[2]
    if not (isinstance(h, int) and isinstance(d, int)) or k.shape != (b, h, keys, d) or v.shape != k.shape:
        return False
    if not (q.dtype == k.dtype == v.dtype == out.dtype) or not written_by_output_spec(op, out):
        return False
    return takes(q.dtype, d, 1, bool(kwargs.get("is_causal")), mask_spec.dtype,
                 key_mask_strides(mask_spec, (b, h, m, keys)) is not None)


def multiple_of_16(value, scalars: dict) -> bool:
    """Whether the size ``value`` (an int, or a ``Ref`` to one of ``scalars``) is a multiple of 16
    at every size of the axes (a stride of 2304 * seq is): the kernel may then load 16 bytes at a
    time along it, as Triton's JIT specializes such an argument."""
    if isinstance(value, int):
        return value % 16 == 0
    op = scalars.get(value.name) if isinstance(value, g.Ref) else None
    if op is None:
        return False
    factors = [multiple_of_16(a, scalars) for a in op.args]
    return op.fn == "mul" and any(factors) or op.fn in ("add", "sub") and all(factors)


def lowered(op: g.Extern, specs: dict, out_name: str, at_most, scalars: dict) -> tuple[list, list]:
    """The ops (the sizes' ``Scalar``s, the output's allocation, the launch) and the kernel of one call;
    ``at_most``: a size's largest value (``sizes.at_most``), for the grid of dynamic sizes;
    ``scalars``: the program's ``Scalar``s by name."""
    kwargs = dict(op.kwargs)
    q_ref, k_ref, v_ref = op.args[:3]
    mask = kwargs["attn_mask"]
    q, k, v, out, mask_spec = (specs[n] for n in (q_ref.name, k_ref.name, v_ref.name, out_name, mask.name))
    (b, h, m, d), keys = q.shape, k.shape[2]
    sizes = RuntimeSizes()
    rows, n_keys = sizes.param(m, "query_rows"), sizes.param(keys, "keys")
    strides = {label: sizes.strides(spec.stride, label) for label, spec in (("q", q), ("k", k), ("v", v))}
    strides["mask"] = sizes.strides(key_mask_strides(mask_spec, (b, h, m, keys)), "mask")
    ops, out_spec = output_spec(out, out_name, q.shape)
    strides["out"] = sizes.strides(out_spec.stride, "out")
    dynamic = not all(isinstance(x, int) for x in (b, m))
    block_m = ROWS
    if dynamic:  # programs: batch * heads * ceil(rows / block_m), computed per call
        padded = g.Scalar(f"{out_name}_rows_up", "add", (m, block_m - 1))
        blocks = g.Scalar(f"{out_name}_row_blocks", "floordiv", (g.Ref(padded.out), block_m))
        per_batch = g.Scalar(f"{out_name}_head_programs", "mul", (g.Ref(blocks.out), h))
        programs = g.Scalar(f"{out_name}_programs", "mul", (g.Ref(per_batch.out), b))
        ops += [padded, blocks, per_batch, programs]
        grid = (at_most(b) * h * cdiv(at_most(m), block_m), 1, 1)
    else:
        grid = (b * h * cdiv(m, block_m), 1, 1)
    scale = kwargs.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mask_kind = "bool" if mask_spec.dtype == "bool" else "additive"
    summary = (f"[{b if isinstance(b, int) else 'batch'}, {h}, {m if isinstance(m, int) else 'queries'}, {d}] "
               f"over {keys if isinstance(keys, int) else 'as many'} keys, {q.dtype}, a {mask_kind} key mask; "
               f"{block_m} rows a program")
    source = render("prefill_attention.py.j2", name="KERNEL", heads=h, rows=rows, keys=n_keys, sizes=sizes.params,
                    dynamic_grid=dynamic, q_stride=strides["q"], k_stride=strides["k"], v_stride=strides["v"],
                    out_stride=strides["out"], mask=mask_kind, mask_stride=strides["mask"],
                    key_tail=not isinstance(keys, int) or keys % BLOCK_N != 0, scale_log2=repr(scale * LOG2E),
                    out_type=TRITON_DTYPE[out.dtype], summary=summary)
    tensors = [("q_ptr", q_ref.name, q), ("k_ptr", k_ref.name, k), ("v_ptr", v_ref.name, v),
               ("mask_ptr", mask.name, mask_spec), ("out_ptr", out_name, out_spec)]
    int_params = tuple(sizes.params) + (("xnumel",) if dynamic else ())
    values = tuple(sizes.values) + ((g.Ref(programs.out),) if dynamic else ())
    kernel, args = _kernel("attention_masked_prefill", source, tensors,
                           (("BLOCK_M", block_m), ("BLOCK_N", BLOCK_N), ("BLOCK_D", d)), grid,
                           (("x", grid[0]),) if dynamic else (("m", m), ("n", keys), ("d", d)), writes=("out_ptr",),
                           scalars=int_params, num_stages=STAGES)
    if dynamic:
        every = scalars | {o.out: o for o in ops if isinstance(o, g.Scalar)}
        strides = [p for p, v in zip(sizes.params, sizes.values) if "stride" in p and multiple_of_16(v, every)]
        kernel = g.replace(kernel, dynamic_numels=("x",), divisible_by_16=kernel.divisible_by_16 + tuple(strides))
    return ops + [g.Alloc(out_name, out_spec), g.Launch(kernel.name, args + values)], [kernel]
