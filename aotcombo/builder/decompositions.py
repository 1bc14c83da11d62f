"""Ops rewritten, before Inductor sees them, into ops it writes Triton kernels for.

Inductor calls some ops as extern kernels (fallbacks): each is a launch of its own that no
combo kernel can take in. Where such an op has a plain formulation in ops Inductor lowers,
the trace decomposes it here, so its work lands in kernels the planner can combine.

- ``EmbeddingBag`` (sum or mean, 1-D ids with per-bag offsets, no ``padding_idx``): each id's
  bag found by a binary search of the offsets, the rows gathered, (weighted,) and added into
  their bags with atomic adds, the way TorchRec/FBGEMM's table-batched embeddings work. A
  DLRM's 26 lookups then become two combo launches (zeros, then the gathers and adds)
  instead of 26 extern calls. The other outputs (offset2bag, bag sizes) are computed too,
  as eager's CUDA kernel defines them; max mode, 2-D ids and padding stay extern calls.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
SUM, MEAN = 0, 1


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=SUM, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """``aten.embedding_bag`` and ``aten._embedding_bag(_forward_only)``: (output, offset2bag,
    bag_size, max_indices)."""
    if mode not in (SUM, MEAN) or indices.dim() != 1 or offsets.dim() != 1 or padding_idx is not None and \
            padding_idx >= 0:
        return NotImplemented
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    positions = torch.arange(indices.shape[0], device=indices.device, dtype=offsets.dtype)
    bag = torch.searchsorted(offsets[:bags], positions, right=True) - 1  # the last bag starting at or before
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1).to(rows.dtype)
    output = weight.new_zeros(bags, weight.shape[1]).index_add(0, bag, rows)
    sizes = torch.zeros(offsets.shape[0], device=indices.device, dtype=indices.dtype).index_add(
        0, bag, torch.ones_like(indices))
    if mode == MEAN:
        output = output / sizes[:bags].clamp_min(1).unsqueeze(1).to(output.dtype)
    return output, bag.to(indices.dtype), sizes, indices.new_empty(0)


TABLE = {op: embedding_bag for op in (aten.embedding_bag.default, aten.embedding_bag.padding_idx,
                                     aten._embedding_bag.default, aten._embedding_bag_forward_only.default)}
