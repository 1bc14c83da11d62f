"""Linears whose rows are sizes of dynamic axes (``--dynamic``): what a size class bounds them by,
and shapes compared symbolically (never by the example's sizes)."""

from __future__ import annotations

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .recipe import DECODE_MAX_ROWS

# A size class of calls of at most this many tokens: linears of as few rows are ours (the
# decode-step rule of recipe.tiles: memory-bound, a kernel of ours with its norm and epilogue beats
# cuBLAS and Inductor's kernels around it).
FEW_TOKENS = DECODE_MAX_ROWS
# ... for weights up to this many bytes. H100, torch 2.11: BERT-base's (3.5-4.7 MB) fused with their
# norms and epilogues made the class's 1 x 7 call 0.421 -> 0.347 ms with its attention ours
# (benchmarks/axes_bench.py); Llama 3.2 1B's (8 MB and up: q/k/v combined 12 MB, the LM head 525 MB)
# in the class's 16-row tiles made a decode step through the prompt package 1.74 -> 2.00 ms against
# cuBLAS (a GEMV at one row). Sizes between the two are unmeasured.
FEW_TOKENS_MAX_WEIGHT_BYTES = 5 * 2 ** 20


def rows_bound(rows: torch.SymInt, max_tokens: int | None) -> int | None:
    """The most ``rows`` can be when the product of every dynamic axis is at most ``max_tokens``
    (each axis at least 1): ``c * max_tokens`` for ``rows`` a constant ``c`` times a product of
    distinct axes; None without ``max_tokens`` or for another expression."""
    if max_tokens is None:
        return None
    coefficient, product = sympy.sympify(str(rows)).as_coeff_Mul()
    powers = product.as_powers_dict()
    if not coefficient.is_Integer or coefficient < 1 or any(p != 1 or not b.is_Symbol for b, p in powers.items()):
        return None
    return int(coefficient) * max_tokens


def same_shape(shape, other) -> bool:
    """Equal shapes, sizes of dynamic axes included (never decided by the example's sizes)."""
    return len(shape) == len(other) and all(statically_known_true(a == b) for a, b in zip(shape, other))


def rows_contiguous(t: torch.Tensor) -> bool:
    """Whether ``t``'s rows (its last dim) follow one another, whatever the dynamic sizes: a
    fused linear with dynamic rows reads them at a fixed stride."""
    stride, size = t.stride(), t.shape
    return stride[-1] == 1 and all(statically_known_true(stride[d] == stride[d + 1] * size[d + 1])
                                   for d in range(t.dim() - 1))


def size_classes(dynamic) -> tuple[int | None, ...]:
    """The size classes a build with ``dynamic`` axes traces, each the most tokens (the product of
    every axis's size) of its calls, None for every call: one program when every call is a few
    tokens (``FEW_TOKENS``), or none is; else a program for calls of a few tokens, whose linears
    are ours (a decode step's rule), then one for the rest."""
    if dynamic is None:
        return (None,)
    fewest = most = 1
    for axis in dynamic.axes:
        fewest, most = fewest * axis.min, most * axis.max
    if most <= FEW_TOKENS:
        return (most,)
    return (None, FEW_TOKENS) if fewest <= FEW_TOKENS else (None,)
