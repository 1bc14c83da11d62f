"""The exported graph's forms of a rotary embedding and of a static cache's one-position write, as
``rope_fold`` reads them.

Rotary embeddings (``rotary``), in the layouts the models write:

- "half", transformers' ``apply_rotary_pos_emb``: ``x * cos + rotate_half(x) * sin``, with
  ``rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2])`` and cos, sin of d entries;
- "pairs", gpt-fast's and Meta's (``sample_models/llm_decode.py``): x in float32 as d/2 pairs,
  ``stack(x0 cos - x1 sin, x1 cos + x0 sin).flatten()``, cast back to x's dtype, cos, sin of d/2.

Cache writes (``cache_write``), each read by the attention and copied into its buffer at the end
(``passes.write_state_in_place``) alone:

- ``index_copy(cache, 2, index, value)``, one position for every row (transformers' ``StaticCache``);
- ``cache.transpose(1, 2).index_put_((rows, index), value.transpose(1, 2))``, ``index`` [b, 1]: a
  position a row (``llm_decode.py``), the attention reading the first b rows.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

aten = torch.ops.aten
_END = (9223372036854775807, None)  # a slice to the end of its dim
VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)


@dataclass(frozen=True)
class Rotary:
    x: torch.fx.Node
    cos: torch.fx.Node
    sin: torch.fx.Node
    style: str  # "half" | "pairs"


@dataclass(frozen=True)
class Write:
    cache: torch.fx.Node  # the buffer
    index: torch.fx.Node  # [1]: every row at that position; [b, 1]: a position a row
    value: torch.fx.Node  # [b, heads, 1, d]
    dead: tuple  # the write's nodes, each before those it reads: erased once the op writes the cache


def rotary(node) -> Rotary | None:
    return _half(node) or _pairs(node)


def cache_write(written, attention, copied: dict) -> Write | None:
    """The write whose result ``written`` the attention reads, where its result is read by the
    attention and the copy into its buffer alone (``copied``: a value -> its ``copy_`` node)."""
    return _index_copy(written, attention, copied) or _row_index_put(written, attention, copied)


def _is(node, *targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.target in targets


def _last_dim(node, dim) -> bool:
    return dim in (-1, node.meta["val"].dim() - 1)


# --- rotary embeddings -------------------------------------------------------------------

def _half(node) -> Rotary | None:
    if not _is(node, aten.add.Tensor) or len(node.args) != 2:
        return None
    products = [tuple(a.args) if _is(a, aten.mul.Tensor) and len(a.args) == 2 and all(
        isinstance(f, torch.fx.Node) for f in a.args) else None for a in node.args]
    if None in products:
        return None
    for (a, b), (c, d) in (products, products[::-1]):
        for x, cos in ((a, b), (b, a)):
            for turned, sin in ((c, d), (d, c)):
                if _rotated_half(turned) is x:
                    return Rotary(x, cos, sin, "half")
    return None


def _rotated_half(node):
    """x where ``node`` is ``cat([neg(x[..., half:]), x[..., :half]], -1)``, else None."""
    if not _is(node, aten.cat.default) or node.meta.get("val") is None:
        return None
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    if not _last_dim(node, dim) or len(parts) != 2 or not _is(parts[0], aten.neg.default):
        return None
    half = node.meta["val"].shape[-1] // 2
    high, low = parts[0].args[0], parts[1]
    if not (_slice_of(high, half, _END) and _slice_of(low, 0, (half,)) and high.args[0] is low.args[0]):
        return None
    return low.args[0]


def _slice_of(node, start: int, ends: tuple) -> bool:
    if not _is(node, aten.slice.Tensor):
        return False
    x, dim, begin, end = (*node.args, None, None, None)[:4]
    return _last_dim(x, dim) and begin == start and end in ends


def _pairs(node) -> Rotary | None:
    """``type_as(view(stack([x0 c - x1 s, x1 c + x0 s], -1), x.shape), x)`` of ``x0, x1 =
    view(x.float(), [..., d/2, 2]).unbind(-1)``."""
    cast = node
    if not _is(cast, aten.type_as.default, aten._to_copy.default):
        return None
    flat = cast.args[0]
    if not _is(flat, *VIEWS) or not _is(flat.args[0], aten.stack.default):
        return None
    stack = flat.args[0]
    if len(stack.args) < 2 or not _last_dim(stack, stack.args[1]) or len(stack.args[0]) != 2:
        return None
    first, second = stack.args[0]
    if not (_is(first, aten.sub.Tensor) and _is(second, aten.add.Tensor)):
        return None
    found = _pair_products(first, second)
    if found is None:
        return None
    x0, x1, cos, sin = found
    unbind = x0.args[0]
    if x1.args[0] is not unbind or not _is(unbind, aten.unbind.int) or not _last_dim(unbind.args[0], unbind.args[1]):
        return None
    grouped = unbind.args[0]  # view(float(x), [..., d/2, 2]); float(x) is x itself where x is float32
    if not _is(grouped, *VIEWS):
        return None
    x = grouped.args[0].args[0] if _is(grouped.args[0], aten._to_copy.default) else grouped.args[0]
    if x.meta["val"].shape != cast.meta["val"].shape or x.meta["val"].dtype != cast.meta["val"].dtype:
        return None
    return Rotary(x, cos, sin, "pairs")


def _pair_products(first, second):
    """(x0, x1, cos, sin) where ``first`` is x0 cos - x1 sin and ``second`` x1 cos + x0 sin, x0 and
    x1 getitems 0 and 1 of one unbind."""
    def factors(node):
        return tuple(node.args) if _is(node, aten.mul.Tensor) and len(node.args) == 2 else None

    a, b = (factors(n) for n in first.args)
    c, d = (factors(n) for n in second.args)
    if None in (a, b, c, d):
        return None
    for x0, cos in (a, a[::-1]):
        for x1, sin in (b, b[::-1]):
            if not (_item(x0, 0) and _item(x1, 1)):
                continue
            if {frozenset(c), frozenset(d)} == {frozenset((x1, cos)), frozenset((x0, sin))}:
                return x0, x1, cos, sin
    return None


def _item(node, index: int) -> bool:
    return _is(node, operator.getitem) and node.args[1] == index


# --- cache writes ------------------------------------------------------------------------

def _index_copy(written, attention, copied: dict) -> Write | None:
    if not _is(written, aten.index_copy.default):
        return None
    cache, dim, index, value = written.args
    if dim not in (2, -2) or written not in copied or copied[written].args[0] is not cache:
        return None
    if set(written.users) != {attention, copied[written]} or tuple(index.meta["val"].shape) != (1,):
        return None
    return Write(cache, index, value, (copied[written], written))


def _row_index_put(written, attention, copied: dict) -> Write | None:
    """``slice(transpose(index_put(transpose(cache, 1, 2), [rows, index], transpose(value, 1, 2)), 1, 2),
    0, 0, b)`` (the slice absent where b is the whole buffer), rows ``arange(b)[:, None]``."""
    rows_read = written
    if _is(written, aten.slice.Tensor):
        if tuple(written.args[1:3]) != (0, 0) or set(written.users) != {attention}:
            return None
        written = written.args[0]
    if not _is(written, aten.transpose.int) or sorted(written.args[1:]) != [1, 2]:
        return None
    put = written.args[0]
    if not _is(put, aten.index_put.default) or len(put.users) != 1 or (len(put.args) > 3 and put.args[3]):
        return None
    moved, indices, value = put.args[:3]
    if not _is(moved, aten.transpose.int) or sorted(moved.args[1:]) != [1, 2] or len(indices) != 2:
        return None
    cache, (rows, index) = moved.args[0], indices
    if cache.op != "placeholder" or written not in copied or copied[written].args[0] is not cache:
        return None
    users = {attention, copied[written]} if rows_read is written else {rows_read, copied[written]}
    if set(written.users) != users or not _is(value, aten.transpose.int) or sorted(value.args[1:]) != [1, 2]:
        return None
    b = rows_read.meta["val"].shape[0]
    if tuple(index.meta["val"].shape) != (b, 1) or not _row_numbers(rows, b):
        return None
    dead = ((rows_read,) if rows_read is not written else ()) + (copied[written], written, put, moved)
    return Write(cache, index, value.args[0], dead)


def _row_numbers(node, b: int) -> bool:
    """Whether ``node`` is ``arange(b)`` as a column, [b, 1]."""
    if not _is(node, aten.unsqueeze.default, *VIEWS) or tuple(node.meta["val"].shape) != (b, 1):
        return False
    made = node.args[0]
    return _is(made, aten.arange.default) and tuple(made.args) == (b,) or _is(made, aten.arange.start) and tuple(
        made.args[:2]) == (0, b)
