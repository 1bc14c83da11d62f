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
- transformers' ``grouped_mm_fallback`` (``transformers::grouped_mm_fallback``: what its default
  ``experts_implementation="grouped_mm"`` calls for MoE experts in a dtype other than bf16):
  rows sorted by expert, ``offs`` the groups' ends. Its eager kernel loops over ``offs.tolist()``
  (a host sync in a custom op only transformers registers, so a package calling it would need
  transformers at run time and could not be captured in a CUDA graph). Here every expert
  multiplies every row (one bmm over the stacked weights, when there are at least as many rows as
  experts; else each row's expert's weights gathered, one bmm of single rows) and each row keeps
  its own expert's product: exact, fixed shapes. Rows past the last group are zero, as there.
- ``argmax`` / ``argmin`` over a long dimension of few rows (greedy or Gumbel-max sampling over
  an LLM's vocabulary at a small batch): Inductor never splits an arg-reduction, so each row is
  one program walking the whole dimension (81 of a sampling head's 205 us at batch 1 over 128256
  logits, H100). Here it is two stages: each chunk of ``ARG_CHUNK`` its max and the max's index
  (one program a chunk), then the best chunk; ties and NaN go to the first index, as in one pass.
- ``histc`` of integers (the expert counts that feed it): each value's bin computed in integers,
  counted with an index add; CUDA's kernel bins integers the same way, and the CPU has no integer
  histc (the interpreter could not run it). Float ``histc`` stays an extern call.
- A floor division into a 16-bit float (DETR's sine position embedding in bfloat16): in float32,
  rounded after, as eager computes it. Inductor's lowering of the 16-bit division calls
  libdevice's ``isinf`` on a 16-bit value, which Triton refuses (torch 2.14, triton 3.8: a
  kernel that would not compile).
- A convolution whose stride is its kernel, with no padding, dilation or groups (a ViT's patch
  embedding, 16 x 16 patches at stride 16): a matmul over the patches, the input's patches
  gathered by a view and one copy. cuDNN ran ViT-B/16's at batch 8 in 83 us plus 28 us of layout
  changes (22 TFLOP/s, H100); as a matmul it is one cuBLAS call: the model 1.116 -> 0.951 ms a call
  (``zoo_bench.py full/vit_base``), the zoo's ViT-Tiny 0.193 -> 0.154. 16-bit only: in float32
  cuDNN convolves in TF32 and a matmul does not (the zoo's ConvNeXt-Atto, float32: 0.261 -> 0.288).
  Kernels of one element (stride 1) stay convolutions: a 1 x 1 one is already a matmul on cuDNN's layout.
- Any other 1-d convolution (no groups, a kernel of at most ``WINDOW_MAX_KERNEL``, 16-bit; a
  Whisper encoder's two over its mel frames): a matmul over its windows, each window's frames one
  after another ([batch * out_frames, kernel * channels] rows, gathered by one copy that reads
  whole rows of channels) by the kernel permuted to match (a weight op: done once, at load).
  cuDNN runs a 1-d convolution as a 2-d one in NCHW, and moved x, W and its output to and from
  NHWC on every call: Whisper-small's two took 106 us a call at batch 2 under torch.compile,
  55 us as matmuls (H200, fp16, ``benchmarks/stem_probe.py``); the full-size Whisper-small
  encoder's package 2.141 / 2.098 -> 1.951 / 1.960 ms a call (``scripts/ab_bench.sh``, A B A B).
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


def grouped_mm_fallback(input, weight, offs):
    """``transformers::grouped_mm_fallback(input [S, K], weight [E, K, N], offs [E]) -> [S, N]``:
    row ``s`` times ``weight[e]`` for the group ``e`` holding it (rows ``offs[e-1]:offs[e]``)."""
    rows, experts = input.shape[0], weight.shape[0]
    index = torch.arange(rows, device=offs.device, dtype=offs.dtype)
    group = (offs.unsqueeze(0) <= index.unsqueeze(1)).sum(1)  # groups ending at or before the row: its group
    past = group >= experts  # past the last group: left zero
    group = group.clamp(max=experts - 1)
    if rows >= experts:  # every expert on every row, each row keeps its own expert's product
        every = torch.bmm(input.unsqueeze(0).expand(experts, -1, -1), weight)  # [E, S, N]
        out = every.gather(0, group.view(1, rows, 1).expand(1, rows, weight.shape[2])).squeeze(0)
    else:  # fewer rows than experts (a decode step): each row's expert's weights
        out = torch.bmm(input.unsqueeze(1), weight[group]).squeeze(1)
    return out.masked_fill(past.unsqueeze(1), 0)


def histc(input, bins=100, min=0, max=0):
    """``aten.histc`` of an integer tensor with ``min < max``: CUDA's integer binning,
    ``(x - min) * bins // (max - min)`` (the top value in the last bin), out-of-range values
    dropped."""
    if input.is_floating_point() or not min < max or int(min) != min or int(max) != max:
        return NotImplemented
    low, high = int(min), int(max)
    x = input.reshape(-1).to(torch.int64)
    inside = (x >= low) & (x <= high)
    bin_ = ((x - low) * bins // (high - low)).clamp(0, bins - 1)
    return torch.zeros(bins, device=input.device, dtype=input.dtype).index_add(0, bin_, inside.to(input.dtype))


def _ints(value, n: int) -> tuple | None:
    """A convolution's stride, padding or dilation as n ints (one int means every dim)."""
    if isinstance(value, str):
        return (0,) * n if value == "valid" else None
    value = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    value = value * n if len(value) == 1 else value
    return value if len(value) == n and all(isinstance(v, int) for v in value) else None


def patch_convolution(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``conv1d/2d/3d`` whose stride is the kernel (patches that do not overlap), with no padding,
    dilation or groups: a matmul of the patches by the flattened kernel."""
    kernel, n = tuple(weight.shape[2:]), weight.dim() - 2
    spatial = tuple(input.shape[2:])
    if groups != 1 or input.dtype not in (torch.float16, torch.bfloat16) or input.dim() != weight.dim():
        return NotImplemented
    if (not 1 <= n <= 3 or _ints(stride, n) != kernel or _ints(padding, n) != (0,) * n
            or _ints(dilation, n) != (1,) * n or all(k == 1 for k in kernel)
            or not all(isinstance(s, int) and s % k == 0 for s, k in zip(spatial, kernel))):
        return NotImplemented
    batch, channels, out = input.shape[0], input.shape[1], [s // k for s, k in zip(spatial, kernel)]
    x = input.reshape(batch, channels, *[v for o, k in zip(out, kernel) for v in (o, k)])
    x = x.permute(0, *range(2, 2 + 2 * n, 2), 1, *range(3, 3 + 2 * n, 2))  # [batch, *out, channels, *kernel]
    patches = x.reshape(-1, weight[0].numel())
    w = weight.reshape(weight.shape[0], -1).t()
    y = patches @ w if bias is None else torch.addmm(bias, patches, w)
    return y.reshape(batch, *out, weight.shape[0]).permute(0, n + 1, *range(1, n + 1))


WINDOW_MAX_KERNEL = 8  # the windows' copy holds at most kernel / stride times the input


def window_convolution(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A 1-d convolution (no groups, 16-bit, a kernel of 2 to ``WINDOW_MAX_KERNEL``): a matmul
    of its windows, [batch * out_frames, kernel * channels] (a window's frames one after
    another), by the kernel permuted to [kernel * channels, out_channels]."""
    size = weight.shape[-1] if weight.dim() == 3 else 0
    stride, padding, dilation = _ints(stride, 1), _ints(padding, 1), _ints(dilation, 1)
    if (groups != 1 or input.dim() != 3 or not 2 <= size <= WINDOW_MAX_KERNEL or None in (stride, padding, dilation)
            or input.dtype not in (torch.float16, torch.bfloat16) or not isinstance(input.shape[2], int)):
        return NotImplemented  # (frames a dynamic axis: the windows' count would be an expression of it)
    (step,), (pad,), (gap,) = stride, padding, dilation
    span = (size - 1) * gap + 1
    if input.shape[2] + 2 * pad < span:
        return NotImplemented
    frames = input.permute(0, 2, 1)  # [batch, frames, channels]
    if pad:
        frames = _padded(frames, 1, pad)
    windows = frames.unfold(1, span, step)[..., ::gap]  # [batch, out_frames, channels, kernel]
    rows = windows.permute(0, 1, 3, 2).reshape(-1, size * input.shape[1])
    w = weight.permute(0, 2, 1).reshape(weight.shape[0], -1).t()
    y = rows @ w if bias is None else torch.addmm(bias, rows, w)
    return y.reshape(input.shape[0], -1, weight.shape[0]).permute(0, 2, 1)


def _padded(x, dim: int, pad: int):
    """``x`` with ``pad`` zeros before and after along ``dim``: ``F.pad`` where its sizes are
    fixed (one kernel with what reads it); a cat where one is symbolic (a dynamic batch: pad's
    fake kernel would fix that size to the example's)."""
    if all(isinstance(size, int) for size in x.shape):
        return torch.nn.functional.pad(x, (0, 0) * (x.dim() - 1 - dim) + (pad, pad))
    zeros = torch.zeros_like(x.narrow(dim, 0, 1)).expand(*x.shape[:dim], pad, *x.shape[dim + 1:])
    return torch.cat([zeros, x, zeros], dim)


def convolution(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``conv1d/2d/3d``: a matmul of patches or of 1-d windows where one fits, else the op."""
    out = patch_convolution(input, weight, bias, stride, padding, dilation, groups)
    if out is NotImplemented:
        out = window_convolution(input, weight, bias, stride, padding, dilation, groups)
    return out


def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``aten.convolution``: as ``convolution`` where it is not transposed."""
    if transposed:
        return NotImplemented
    return convolution(input, weight, bias, stride, padding, dilation, groups)

ARG_SPLIT_MIN, ARG_SPLIT_MAX_ROWS, ARG_CHUNK = 2 ** 14, 64, 512


def _arg_reduction(reduce, pad_value):
    def split(x, dim=None, keepdim=False):
        """``aten.argmax`` / ``argmin`` in two stages where one row is long and rows are few."""
        if dim is None or x.dim() == 0 or x.dtype == torch.bool or not all(isinstance(d, int) for d in x.shape):
            return NotImplemented
        dim = dim % x.dim()
        n, rows = x.shape[dim], x.numel() // max(x.shape[dim], 1)
        if n < ARG_SPLIT_MIN or rows > ARG_SPLIT_MAX_ROWS:
            return NotImplemented
        chunks = -(-n // ARG_CHUNK)
        y = x.movedim(dim, -1)
        if chunks * ARG_CHUNK != n:  # padded past the end with values no element loses a tie to
            fill = pad_value(x.dtype)
            y = torch.cat([y, y.new_full((*y.shape[:-1], chunks * ARG_CHUNK - n), fill)], -1)
        values, local = reduce(y.reshape(*y.shape[:-1], chunks, ARG_CHUNK), -1)
        best = (values.argmax if reduce is torch.max else values.argmin)(-1, keepdim=True)
        index = best * ARG_CHUNK + local.gather(-1, best)
        return index.movedim(-1, dim) if keepdim else index.squeeze(-1)
    return split


def _lowest(dtype):
    return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min


def _highest(dtype):
    return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max


def floor_division(a, b, rounding_mode=None):
    """``aten.div.Tensor_mode`` / ``Scalar_mode`` flooring into a 16-bit float: in float32, rounded
    to it after, as eager's kernels compute it (their opmath type: the same values)."""
    dtype = torch.result_type(a, b)
    if rounding_mode != "floor" or dtype not in (torch.float16, torch.bfloat16):
        return NotImplemented
    b = b.float() if isinstance(b, torch.Tensor) else b
    return torch.div(a.float(), b, rounding_mode="floor").to(dtype)


TABLE = {op: embedding_bag for op in (aten.embedding_bag.default, aten.embedding_bag.padding_idx,
                                     aten._embedding_bag.default, aten._embedding_bag_forward_only.default)}
TABLE[aten.histc.default] = histc
TABLE[aten.argmax.default] = _arg_reduction(torch.max, _lowest)
TABLE[aten.argmin.default] = _arg_reduction(torch.min, _highest)
TABLE.update({op: convolution for op in (aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)})
TABLE[aten.convolution.default] = _convolution
TABLE.update({op: floor_division for op in (aten.div.Tensor_mode, aten.div.Scalar_mode)})


def table() -> dict:
    """TABLE, with transformers' grouped-mm op where transformers registered it (imported)."""
    found = dict(TABLE)
    transformers_ops = getattr(torch.ops, "transformers", None)
    if transformers_ops is not None and hasattr(transformers_ops, "grouped_mm_fallback"):
        found[transformers_ops.grouped_mm_fallback.default] = grouped_mm_fallback
    return found
