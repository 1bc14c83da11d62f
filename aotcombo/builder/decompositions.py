"""Ops rewritten, before Inductor sees them, into ops it writes Triton kernels for.

Inductor calls some ops as extern kernels (fallbacks): each is a launch of its own that no
combo kernel can take in. Where such an op has a plain formulation in ops Inductor lowers,
the trace decomposes it here, so its work lands in kernels the planner can combine.

- ``EmbeddingBag`` (sum or mean, 1-D ids with per-bag offsets, no ``padding_idx``): each id's
  bag counted by a scan of the bag starts, the rows gathered, (weighted,) and added into
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
    bag = _bag_of_each_id(offsets[:bags], indices.shape[0])
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1).to(rows.dtype)
    output = weight.new_zeros(bags, weight.shape[1]).index_add(0, bag, rows)
    sizes = torch.zeros(offsets.shape[0], device=indices.device, dtype=indices.dtype).index_add(
        0, bag, torch.ones_like(indices))
    if mode == MEAN:
        output = output / sizes[:bags].clamp_min(1).unsqueeze(1).to(output.dtype)
    return output, bag.to(indices.dtype), sizes, indices.new_empty(0)


def _bag_of_each_id(starts, n: int):
    """For each of ``n`` ids, the last bag starting at or before it: the number of bag starts
    at or before it, less one. Counted by a scan of the starts marked in a float32 buffer
    (exact below 2^24 ids; Inductor adds float marks atomically, and a search per id made
    Inductor fuse a DLRM's 26 searches into one kernel whose threads walked them one after
    another: 87 of a 113 us forward at batch 512); a binary search past that."""
    if n >= 2 ** 24:
        return torch.searchsorted(starts, torch.arange(n, device=starts.device, dtype=starts.dtype), right=True) - 1
    marks = torch.zeros(n + 1, device=starts.device, dtype=torch.float32).index_add(
        0, starts.clamp(0, n), torch.ones(starts.shape, device=starts.device))  # an empty last bag starts at n
    return marks[:n].cumsum(0).to(starts.dtype) - 1


TABLE = {op: embedding_bag for op in (aten.embedding_bag.default, aten.embedding_bag.padding_idx,
                                     aten._embedding_bag.default, aten._embedding_bag_forward_only.default)}
