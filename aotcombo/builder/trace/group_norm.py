"""GroupNorm for Inductor: each channel's statistics first, then its group's.

Inductor decomposes ``aten.native_group_norm`` into one reduction per (sample, group) over the
group's channels and pixels, flattened channel-major: its reduction index walks a channel's
pixels one after another. Under a convolution's channels-last layout (a UNet's, Inductor's layout
choice) consecutive pixels of a channel sit a whole row of channels apart, so every thread of a
warp loads two bytes from its own 640-byte row: SD 1.5's UNet at 64 x 64 latents, batch 2, spent
about 0.8 ms a call of its 6.8 in such reductions, 20-30 us each for 5 MB (H100,
``benchmarks/kernel_profile.py full/sd_unet --replay``), reduce-overhead's the same.

Here the reduction is a channel's pixels alone (``var_mean`` over H x W, one result per sample
and channel): under channels-last its rows are the contiguous axis, an outer reduction Triton
loads a row of channels at a time; in NCHW a contiguous inner one. The group's mean and variance
then come from its channels' exactly (equal counts: the mean of the means, and the mean of each
channel's variance plus its mean's squared distance from the group's), and the output is
``(x - mean) * (rstd * weight) + bias`` in float32, rounded once, as eager's kernel computes it.
The launches stay four a norm (the channels' partial sums, the channels', the groups', the output),
each reduction now loading whole rows. H100, SD 1.5's UNet (``zoo_bench.py full/sd_unet
--no-compile``, before / after / after with 64 x 32 outer blocks, in turn, twice, 2026-12-06, every
group taken): 6.560 / 6.557 -> 5.784 / 5.785 ms a call (5.812 / 5.808 with the larger blocks: not
kept); the kernels of ours in one replay 2097 -> 1354 us. Its output against float32 eager 1.02e-3
(relative L2; eager's fp16 1.61e-3). Since, groups under ``LARGE_GROUP`` are Inductor's again: the
UNet 583 -> 566 launches a call, checked against eager on the H100, not timed.

Only groups of at least ``LARGE_GROUP`` elements, 16-bit or float32, of at least three dimensions
with sizes fixed at build time; anything else is Inductor's own decomposition. Smaller groups
Inductor reduces in one kernel, a program a group, where this form takes two or three launches
(the zoo's diffusers UNet: 168 -> 199 launches a call with every group taken).

Tried, not kept (built, not timed): three launches, each channel's slices of 128 pixels reduced
and those combined into the group's at once. Inductor tiled the first reduction 8 channels wide
(16-byte rows), and split the group's step, its mean and variance two chains: more launches.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
LARGE_GROUP = 8192  # elements a group: below, Inductor's one persistent reduction (SD 1.5's 16 x 16 x 20)


def native_group_norm(x, weight, bias, n, c, hxw, group, eps):
    """``aten.native_group_norm``: (output, mean, rstd), the last two [n, group] in float32."""
    if (x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or x.dim() < 3
            or not all(isinstance(v, int) for v in (n, c, hxw, group, *x.shape)) or c % group
            or c // group * hxw < LARGE_GROUP):
        return NotImplemented
    per_group = c // group
    xf = x.float().reshape(n, c, hxw)
    var_c, mean_c = torch.var_mean(xf, dim=2, correction=0)  # [n, c]
    mean_c, var_c = mean_c.view(n, group, per_group), var_c.view(n, group, per_group)
    mean = mean_c.mean(dim=2)  # [n, group]
    var = (var_c + (mean_c - mean[:, :, None]).square()).mean(dim=2)
    rstd = torch.rsqrt(var + eps)
    scale = rstd[:, :, None].expand(n, group, per_group).reshape(n, c)
    if weight is not None:
        scale = scale * weight.float()[None, :]
    shifted = xf - mean[:, :, None].expand(n, group, per_group).reshape(n, c, 1)
    out = shifted * scale[:, :, None]
    if bias is not None:
        out = out + bias.float()[None, :, None]
    return out.reshape(x.shape).to(x.dtype), mean, rstd


TABLE = {aten.native_group_norm.default: native_group_norm}
