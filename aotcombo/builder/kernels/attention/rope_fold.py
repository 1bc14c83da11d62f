"""A decode step's rotary embedding and cache write, done by its attention kernel.

Between a decode step's q/k/v linear and its attention, Inductor makes one kernel a layer: the
rotary embedding of the new token's query and key, and the write of its key and value into the
static cache (transformers' ``StaticCache``: ``index_copy`` at the step's position). In the Llama
3.2 1B step that is 16 of 115 launches a token, each a few microseconds of a step whose quantized
GEMVs take little more. ``fold`` rewrites, in the exported graph before Inductor, each decode
attention whose query is ``x * cos + rotate_half(x) * sin``, whose keys are the cache with one
position written (``index_copy(cache, 2, index, rotated key)``) and whose values the same for
the raw value, into one ``aotcombo::rope_attention`` call that writes both caches itself
(``mutates_args``). ``lowering.lower`` makes it the decode attention's kernels, the ``rope``
lines of ``templates/decode_attention.py.j2`` first: each program rotates its query rows, and
the program whose slice of the keys holds the position rotates the key, writes key and value
there and, after a barrier, reads them with the rest of its slice. The other programs never read
that position, so no program waits for another.

Only calls of one query row a head (a decode step), sizes fixed at build time, one position
written, and whose attention ``lowering`` takes as its split or small kernel: nothing is folded
that would not become ours.
"""

from __future__ import annotations

import operator

import torch
from torch.fx.operator_schemas import normalize_function

from ..common import recompiled
from .lowering import HEAD_DIMS, _mode

aten = torch.ops.aten
OP = "aotcombo::rope_attention"
_FUSED = (aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default)
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_END = (9223372036854775807, None)  # a slice to the end of its dim


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' ``apply_rotary_pos_emb`` of x, in float32, rounded once to x's dtype."""
    half = x.shape[-1] // 2
    x32 = x.float()
    rotated = torch.cat((-x32[..., half:], x32[..., :half]), -1)
    return (x32 * cos.float() + rotated * sin.float()).to(x.dtype)


@torch.library.custom_op(OP, mutates_args=("k_cache", "v_cache"))
def rope_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, index: torch.Tensor, mask: torch.Tensor | None,
                   scale: float) -> torch.Tensor:
    """The meaning ``lower``'s kernels implement (eager, any device): q and k rotated, k and v
    written into the caches at ``index`` (dim 2), then attention over the caches, each key/value
    head serving ``q.shape[1] // k_cache.shape[1]`` query heads."""
    k_cache.index_copy_(2, index, apply_rotary(k, cos, sin))
    v_cache.index_copy_(2, index, v.to(v_cache.dtype))
    group = q.shape[1] // k_cache.shape[1]
    keys, values = (c.repeat_interleave(group, 1) for c in (k_cache, v_cache))
    return torch.nn.functional.scaled_dot_product_attention(apply_rotary(q, cos, sin), keys, values, attn_mask=mask,
                                                            scale=scale)


@rope_attention.register_fake
def _(q, k, v, cos, sin, k_cache, v_cache, index, mask, scale):
    return q.new_empty(q.shape)


def fold(ep) -> int:
    """Rewrite each such decode attention in ``ep``'s graph (after ``passes.write_state_in_place``:
    the caches' new values copied into their buffers at the end); returns how many."""
    graph = ep.graph
    copied = {n.args[1]: n for n in graph.nodes
              if n.target is aten.copy_.default and n.args[0].op == "placeholder"}
    count = 0
    for node in list(graph.nodes):
        found = _match(node, copied)
        if found is None:
            continue
        args, out, written = found
        with graph.inserting_before(node):
            call = graph.call_function(torch.ops.aotcombo.rope_attention.default, args)
        call.meta.update(node.meta)
        call.meta["val"] = out.meta["val"]
        out.replace_all_uses_with(call)
        for dead in (out, node, *(copied[w] for w in written), *written):
            graph.erase_node(dead)
        count += 1
    return recompiled(ep, count, dead_code=True)


def _match(node, copied: dict):
    """For an attention ``node`` to fold: the op's arguments, the node's output (its getitem 0)
    and the two cache writes (``index_copy``, each copied into its buffer by ``copied[it]``)."""
    if node.target not in _FUSED:
        return None
    _, bound = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    if bound.get("is_causal") or bound.get("dropout_p", 0.0) or len(node.users) != 1:
        return None
    out = next(iter(node.users))
    if out.target is not operator.getitem or out.args[1] != 0:
        return None
    writes = [_write(bound[name], node, copied) for name in ("key", "value")]
    rotated = _rotary(bound["query"])
    if None in writes or rotated is None:
        return None
    (k_cache, index, k_new), (v_cache, v_index, v) = writes
    key = _rotary(k_new)
    if key is None or v_index is not index or key[1:] != rotated[1:]:
        return None
    q, cos, sin = rotated
    mask = bound.get("attn_bias")
    if not _decode_shapes(q, key[0], v, k_cache, v_cache, cos, sin, index, mask):
        return None
    scale = bound.get("scale") or q.meta["val"].shape[-1] ** -0.5  # sdpa's default
    args = (q, key[0], v, cos, sin, k_cache, v_cache, index, mask, scale)
    return args, out, [bound["key"], bound["value"]]


def _write(written, attention, copied: dict):
    """(cache buffer, index, new value) where ``written`` is ``index_copy(buffer, 2, index, value)``,
    used by ``attention`` and the copy into the buffer alone; else None."""
    if not isinstance(written, torch.fx.Node) or written.target is not aten.index_copy.default:
        return None
    cache, dim, index, value = written.args
    if dim not in (2, -2) or written not in copied or copied[written].args[0] is not cache:
        return None
    if set(written.users) != {attention, copied[written]}:
        return None
    return cache, index, value


def _rotary(node):
    """(x, cos, sin) where ``node`` is ``x * cos + rotate_half(x) * sin`` (transformers'
    ``apply_rotary_pos_emb``; ``rotate_half(x)``: ``cat(-x[..., d/2:], x[..., :d/2])``), else None."""
    if not isinstance(node, torch.fx.Node) or node.target is not aten.add.Tensor or len(node.args) != 2:
        return None
    products = [_factors(a) for a in node.args]
    if None in products:
        return None
    for (a, b), (c, d) in (products, products[::-1]):
        for x, cos in ((a, b), (b, a)):
            for turned, sin in ((c, d), (d, c)):
                if _rotated_half(turned) is x:
                    return x, cos, sin
    return None


def _factors(node):
    if isinstance(node, torch.fx.Node) and node.target is aten.mul.Tensor and len(node.args) == 2 and all(
            isinstance(a, torch.fx.Node) for a in node.args):
        return tuple(node.args)
    return None


def _rotated_half(node):
    """x where ``node`` is ``cat([neg(x[..., half:]), x[..., :half]], -1)``, else None."""
    if not isinstance(node, torch.fx.Node) or node.target is not aten.cat.default:
        return None
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    val = node.meta.get("val")
    if val is None or dim not in (-1, val.dim() - 1) or len(parts) != 2 or parts[0].target is not aten.neg.default:
        return None
    half = val.shape[-1] // 2
    high, low = parts[0].args[0], parts[1]
    if not (_slice_of(high, half, _END) and _slice_of(low, 0, (half,)) and high.args[0] is low.args[0]):
        return None
    return low.args[0]


def _slice_of(node, start: int, ends: tuple) -> bool:
    if not isinstance(node, torch.fx.Node) or node.target is not aten.slice.Tensor:
        return False
    x, dim, begin, end = (*node.args, None, None, None)[:4]
    return dim in (-1, x.meta["val"].dim() - 1) and begin == start and end in ends


def _decode_shapes(q, k, v, k_cache, v_cache, cos, sin, index, mask) -> bool:
    """Whether these make one decode row a head, sizes fixed, that ``lowering`` takes as its own."""
    vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in (q, k, v, k_cache, v_cache, cos, sin)]
    if any(t is None or t.dim() != 4 for t in vals):
        return False
    q, k, v, k_cache, v_cache, cos, sin = vals
    if not all(isinstance(s, int) for t in vals for s in (*t.shape, *t.stride())):
        return False
    (b, h, m, d), (kv, keys) = q.shape, k_cache.shape[1:3]
    index = index.meta.get("val")
    if m != 1 or index is None or index.dtype != torch.int64 or tuple(index.shape) != (1,) or h % kv or d % 2:
        return False
    if k.shape != (b, kv, 1, d) or v.shape != k.shape or k_cache.shape != (b, kv, keys, d) != v_cache.shape:
        return False
    if q.dtype not in _DTYPES or not q.dtype == k.dtype == v.dtype == k_cache.dtype == v_cache.dtype:
        return False
    if cos.shape != sin.shape or cos.shape[1:3] != (1, 1) or cos.shape[0] not in (1, b) or cos.shape[3] != d:
        return False
    if mask is not None:
        mask = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
        if mask is None or mask.dim() != 4 or mask.dtype not in (torch.bool, q.dtype, torch.float32) or not all(
                isinstance(s, int) and s in (1, n) for s, n in zip(mask.shape, (b, h, 1, keys))):
            return False
    return d in HEAD_DIMS and _mode(1, keys, h // kv, False) in ("split", "small")


# --- after the trace: the attention call it makes, for ``lowering`` ---------------------

LOWERED_OP = f"{OP}.default"


def as_attention(op, specs: dict):
    """The attention call an ``aotcombo::rope_attention`` op makes (its query, the caches as keys
    and values: ``lowering`` reads such a call), and its ``rope`` for ``lowering.lowered_ops``:
    the kernel's further inputs and the strides the template reads them by."""
    from ... import graph as g
    from .lowering import _broadcast_strides

    q, k, v, cos, sin, k_cache, v_cache, index, mask, scale = op.args
    (b, _, _, d) = specs[q.name].shape
    call = g.Extern(op=g.ATTENTION, args=(q, k_cache, v_cache),
                    kwargs=(("attn_mask", mask), ("scale", scale), ("enable_gqa", True)),
                    out=op.out, writes=(), aliases=())
    inputs = [(param, ref.name, specs[ref.name]) for param, ref in
              (("k_new_ptr", k), ("v_new_ptr", v), ("cos_ptr", cos), ("sin_ptr", sin), ("index_ptr", index))]
    strides = {"k_new": specs[k.name].stride, "v_new": specs[v.name].stride,
               "cos": _broadcast_strides(specs[cos.name], (b, 1, 1, d)),
               "sin": _broadcast_strides(specs[sin.name], (b, 1, 1, d)), "half": d // 2}
    return call, {"inputs": inputs, "strides": strides}
