"""torch decompositions that fix a dynamic axis to pick a memory layout, made not to.

``F.interpolate(..., mode="nearest")`` decomposes (``torch._decomp``'s ``_upsample_nearest``)
into an index and a copy to the input's suggested memory format, which on CUDA it then sets to
contiguous below 4 channels ("only use channels_last path when it's faster"). Reading the
channel count there guards on it. DETR interpolates its pixel mask as ``mask[None]``: the batch
is the channel dim, and export refused ``--dynamic batch=1:4`` with "batch <= 3". The heuristic
only changes a channels-last input's layout; a contiguous one stays contiguous either way.
``upsample_without_channel_guard`` reads the count only for a channels-last input: the same
layouts, no guard for the others.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import torch
from torch._decomp import decompositions
from torch._prims_common import suggest_memory_format

aten = torch.ops.aten


@decompositions.pw_cast_for_opmath
def _upsample_nearest(input, output_size, scales, exact=False):
    """torch's ``_upsample_nearest`` (as of 2.14), the channel count read after the layout."""
    spatial = decompositions._compute_upsample_nearest_indices(input, output_size, scales, exact=exact)
    result = aten._unsafe_index(input, [None, None] + spatial)
    if result.ndim in (4, 5):
        memory_format = suggest_memory_format(input)
        if (memory_format != torch.contiguous_format and result.ndim == 4 and input.device.type == "cuda"
                and input.shape[1] < 4):
            memory_format = torch.contiguous_format
        result = result.contiguous(memory_format=memory_format)
    return result


def upsample_without_channel_guard():
    """While tracing: nearest upsampling decomposed without a guard on a contiguous input's channels."""
    if not callable(getattr(decompositions, "_compute_upsample_nearest_indices", None)):
        return contextlib.nullcontext()  # another torch: its own decomposition
    return mock.patch.object(decompositions, "_upsample_nearest", _upsample_nearest)
