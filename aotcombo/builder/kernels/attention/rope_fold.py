"""A decode step's rotary embedding and cache write, done by its attention kernel.

Between a decode step's q/k/v linear and its attention, Inductor makes a kernel a layer or more:
the rotary embedding of the new token's query and key, and the write of its key and value into
the static cache. In the Llama 3.2 1B step that is 16 of 115 launches a token, each a few
microseconds of a step whose quantized GEMVs take little more; ``sample_models/llm_decode.py``
makes two a layer (34 launches a step at batch 8). ``fold`` rewrites, in the exported graph before
Inductor, each decode attention whose query is rotated (or a view of it: a model folding its
grouped query heads into rows) and whose keys and values are the cache with one position a row
written (``rope_patterns``: transformers' and gpt-fast's forms of both) into one
``aotcombo::rope_attention`` call that writes both caches itself (``mutates_args``).
``lowering.lower`` makes it the decode attention's kernels, the ``rope`` lines of
``templates/decode_attention.py.j2`` first: each program rotates its query rows, and the program
whose slice of the keys holds its row's position rotates the key, writes key and value there
and, after a barrier, reads them with the rest of its slice. The other programs never read that
position, so no program waits for another.

Only calls of one token a row, sizes fixed at build time, and whose attention ``lowering`` takes
as its split or small kernel: nothing is folded that would not become ours.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
from torch.fx.operator_schemas import normalize_function

from ..common import recompiled
from .lowering import HEAD_DIMS, _mode
from .rope_patterns import VIEWS, cache_write, rotary

aten = torch.ops.aten
OP = "aotcombo::rope_attention"
_FUSED = (aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default)
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str) -> torch.Tensor:
    """x's rotary embedding (``rope_patterns``' styles), in float32, rounded once to x's dtype."""
    x32, cos, sin = x.float(), cos.float(), sin.float()
    if style == "half":
        half = x.shape[-1] // 2
        return (x32 * cos + torch.cat((-x32[..., half:], x32[..., :half]), -1) * sin).to(x.dtype)
    x0, x1 = x32.unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), -1).flatten(-2).to(x.dtype)


@torch.library.custom_op(OP, mutates_args=("k_cache", "v_cache"))
def rope_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   k_cache: torch.Tensor, v_cache: torch.Tensor, index: torch.Tensor, mask: torch.Tensor | None,
                   scale: float, style: str) -> torch.Tensor:
    """The meaning ``lower``'s kernels implement (eager, any device): q and k rotated, k and v
    written into the caches at ``index`` (dim 2; [b, 1]: row i at its own), then attention over
    the caches' first b rows, each key/value head serving ``q.shape[1] // k_cache.shape[1]`` query
    heads."""
    b = q.shape[0]
    key = apply_rotary(k, cos, sin, style)
    if index.dim() == 1:
        k_cache[:b].index_copy_(2, index, key)
        v_cache[:b].index_copy_(2, index, v.to(v_cache.dtype))
    else:
        rows = torch.arange(b, device=index.device)[:, None]
        k_cache.transpose(1, 2).index_put_((rows, index), key.transpose(1, 2))
        v_cache.transpose(1, 2).index_put_((rows, index), v.to(v_cache.dtype).transpose(1, 2))
    group = q.shape[1] // k_cache.shape[1]
    keys, values = (c[:b].repeat_interleave(group, 1) for c in (k_cache, v_cache))
    return torch.nn.functional.scaled_dot_product_attention(apply_rotary(q, cos, sin, style), keys, values,
                                                            attn_mask=mask, scale=scale)


@rope_attention.register_fake
def _(q, k, v, cos, sin, k_cache, v_cache, index, mask, scale, style):
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
        args, out, writes = found
        with graph.inserting_before(node):
            q = args[0]
            if isinstance(q, tuple):  # the query as the attention reads it: a view of the unrotated one
                x, shape = q
                q = graph.call_function(aten.view.default, (x, list(shape)))
                q.meta["val"] = x.meta["val"].view(shape)
            call = graph.call_function(torch.ops.aotcombo.rope_attention.default, (q, *args[1:]))
        call.meta.update(node.meta)
        call.meta["val"] = out.meta["val"]
        out.replace_all_uses_with(call)
        for dead in (out, node, *(n for w in writes for n in w.dead)):
            graph.erase_node(dead)
        count += 1
    return recompiled(ep, count, dead_code=True)


def _match(node, copied: dict):
    """For an attention ``node`` to fold: the op's arguments (the query as (x, shape) where the
    attention reads a view of the rotated one), its output (getitem 0) and the two cache writes."""
    if node.target not in _FUSED:
        return None
    _, bound = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    if bound.get("is_causal") or bound.get("dropout_p", 0.0) or len(node.users) != 1:
        return None
    out = next(iter(node.users))
    if out.target is not operator.getitem or out.args[1] != 0:
        return None
    writes = [cache_write(bound[name], node, copied) for name in ("key", "value")]
    query, shape = bound["query"], None
    if isinstance(query, torch.fx.Node) and query.target in VIEWS and len(query.users) == 1:
        query, shape = query.args[0], tuple(query.meta["val"].shape)  # the model's own grouped-query fold
    rotated = rotary(query)
    if None in writes or rotated is None or len(query.users) != 1:
        return None
    key_write, value_write = writes
    key = rotary(key_write.value)
    if key is None or value_write.index is not key_write.index or (key.cos, key.sin, key.style) != (
            rotated.cos, rotated.sin, rotated.style):
        return None
    mask = bound.get("attn_bias")
    q = (rotated.x, shape) if shape else rotated.x
    if not _decode_shapes(rotated.x, shape, key.x, value_write.value, key_write, value_write, rotated, mask):
        return None
    scale = bound.get("scale") or rotated.x.meta["val"].shape[-1] ** -0.5  # sdpa's default
    args = (q, key.x, value_write.value, rotated.cos, rotated.sin, key_write.cache, value_write.cache,
            key_write.index, mask, scale, rotated.style)
    return args, out, writes


def _decode_shapes(x, shape, k, v, key_write, value_write, rotated, mask) -> bool:
    """Whether these make one decode token a row, sizes fixed, that ``lowering`` takes as its own."""
    nodes = (x, k, v, key_write.cache, value_write.cache, rotated.cos, rotated.sin)
    vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in nodes]
    if any(t is None or t.dim() != 4 for t in vals):
        return False
    x, k, v, k_cache, v_cache, cos, sin = vals
    if not all(isinstance(s, int) for t in vals for s in (*t.shape, *t.stride())):
        return False
    (b, heads, t, d), (kv, keys) = x.shape, k_cache.shape[1:3]
    h, m = (shape[1], shape[2]) if shape else (heads, 1)
    if t != 1 or (shape and (len(shape) != 4 or shape[0] != b or shape[3] != d or h * m != heads)):
        return False
    if heads % kv or d % 2 or k.shape != (b, kv, 1, d) or v.shape != k.shape:
        return False
    if k_cache.shape[0] < b or k_cache.shape[1:] != (kv, keys, d) or v_cache.shape != k_cache.shape:
        return False
    if x.dtype not in _DTYPES or not x.dtype == k.dtype == v.dtype == k_cache.dtype == v_cache.dtype:
        return False
    width = d if rotated.style == "half" else d // 2
    if cos.shape != sin.shape or cos.shape[1:] != (1, 1, width) or cos.shape[0] not in (1, b):
        return False
    if mask is not None:
        mask = mask.meta.get("val") if isinstance(mask, torch.fx.Node) else None
        if mask is None or mask.dim() != 4 or mask.dtype not in (torch.bool, x.dtype, torch.float32) or not all(
                isinstance(s, int) and s in (1, n) for s, n in zip(mask.shape, (b, h, m, keys))):
            return False
    return d in HEAD_DIMS and _mode(m, keys, h // kv, False) in ("split", "small")


# --- after the trace: the attention call it makes, for ``lowering`` ---------------------

LOWERED_OP = f"{OP}.default"


def as_attention(op, specs: dict):
    """The attention call an ``aotcombo::rope_attention`` op makes (its query, the caches' first b
    rows as keys and values: ``lowering`` reads such a call), the specs it reads them by, and its
    ``rope`` for ``lowering.lowered_ops``: the kernel's further inputs and the template's strides."""
    from ... import graph as g
    from .lowering import _broadcast_strides

    q, k, v, cos, sin, k_cache, v_cache, index, mask, scale, style = op.args
    b, d = specs[q.name].shape[0], specs[q.name].shape[3]
    call = g.Extern(op=g.ATTENTION, args=(q, k_cache, v_cache),
                    kwargs=(("attn_mask", mask), ("scale", scale), ("enable_gqa", True)),
                    out=op.out, writes=(), aliases=())
    rows = {c.name: dataclasses.replace(specs[c.name], shape=(b, *specs[c.name].shape[1:])) for c in (k_cache, v_cache)}
    inputs = [(param, ref.name, specs[ref.name]) for param, ref in
              (("k_new_ptr", k), ("v_new_ptr", v), ("cos_ptr", cos), ("sin_ptr", sin), ("index_ptr", index))]
    width = d if style == "half" else d // 2
    index_spec = specs[index.name]
    strides = {"k_new": specs[k.name].stride, "v_new": specs[v.name].stride, "style": style, "half": d // 2,
               "cos": _broadcast_strides(specs[cos.name], (b, 1, 1, width)),
               "sin": _broadcast_strides(specs[sin.name], (b, 1, 1, width)),
               "index": index_spec.stride[0] if len(index_spec.shape) == 2 else 0}
    return call, rows, {"inputs": inputs, "strides": strides}
