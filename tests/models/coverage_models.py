"""Small models, one per construct Inductor can emit; the coverage table in
docs/coverage.md names them. Each entry: (model, example inputs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


class Lambda(nn.Module):
    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for k, v in params.items():
            self.register_parameter(k, nn.Parameter(v, requires_grad=False))

    def forward(self, *xs):
        return self.fn(self, *xs)


def pointwise_1d():
    return Lambda(lambda m, x: torch.sigmoid(x) * 3 + x.abs()), (_randn(5000),)


def pointwise_2d_transposed():
    return Lambda(lambda m, x, y: x.t() + y), (_randn(300, 200), _randn(200, 300, seed=1))


def pointwise_3d_permuted():
    return Lambda(lambda m, x: (x.permute(2, 0, 1) * 2).contiguous() + 1), (_randn(20, 30, 40),)


def broadcasting():
    return Lambda(lambda m, x, b: x * b[None, :] + b.mean()), (_randn(64, 48), _randn(48, seed=1))


def dtype_mix():
    def fn(m, a, b, c, d, e):
        return (a.float() + b.float() * 2, (c > 0) & (e != 0), d * a.double(),
                (a.to(torch.bfloat16) * c).to(torch.float16))
    return Lambda(fn), (
        _randn(128, dtype=torch.float16),
        _randn(128, dtype=torch.bfloat16, seed=1),
        _randn(128, seed=2),
        _randn(128, dtype=torch.float64, seed=3),
        torch.randint(-3, 3, (128,), dtype=torch.int32),
    )


def zero_dim():
    return Lambda(lambda m, x, s: (x * s, s.exp())), (_randn(16), _randn(()))


def reductions():
    def fn(m, x):
        return (x.sum(1), x.mean(0), x.amax(1), x.amin(0), x.argmax(1), x.argmin(0), x.prod(1), x.std(1))
    return Lambda(fn), (_randn(64, 33) * 0.5 + 1,)


def looped_inner_reduction():
    return Lambda(lambda m, x: (x.sum(-1), x.max(-1).values)), (_randn(8, 10000),)


def outer_reduction():
    return Lambda(lambda m, x: x.sum(0)), (_randn(3000, 64),)


def split_reduction():
    return Lambda(lambda m, x: (x.sum(), x.abs().max())), (_randn(1 << 20),)


def mixed_order_reduction():
    """One tensor reduced along both dims: Inductor fuses the two into one kernel that
    leaves partial column sums in a workspace, and sums those in its wrapper (sizes at
    its thresholds: 5 Mi elements, rows >= 4096 and >= 2x the columns)."""
    return Lambda(lambda m, x: (x.sum(0), x.sum(1))), (_randn(8192, 640),)


def welford():
    def fn(m, x, w, b):
        var, mean = torch.var_mean(x, dim=-1)
        return F.layer_norm(x, (x.shape[-1],), w, b), var, mean
    return Lambda(fn), (_randn(32, 96), _randn(96, seed=1), _randn(96, seed=2))


def batch_norm_eval():
    bn = nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        bn.running_mean.copy_(_randn(8))
        bn.running_var.copy_(_randn(8, seed=1).abs() + 0.5)
        bn.weight.copy_(_randn(8, seed=2))
    return bn, (_randn(4, 8, 10, 10, seed=3),)


def scan():
    return Lambda(lambda m, x: (x.cumsum(1), x.cumprod(0))), (_randn(16, 100) * 0.1 + 1,)


def sort():
    return Lambda(lambda m, x: torch.sort(x, dim=-1)), (_randn(8, 64),)


def many_independent_reductions_and_pointwise():
    def fn(m, *xs):
        outs = []
        for i, x in enumerate(xs):
            outs.append(x.sum(-1) if i % 2 else x * 2 + 1)
        return tuple(outs)
    return Lambda(fn), tuple(_randn(16, 40 + 8 * i, seed=i) for i in range(12))


def mixed_tiling_combo():
    def fn(m, a, b, c):
        return a.t().contiguous() * 2, b + 1, c.sum(1)
    return Lambda(fn), (_randn(64, 96), _randn(4096, seed=1), _randn(32, 128, seed=2))


def inplace_input_mutation():
    def fn(m, x, y):
        x.add_(1)
        return y * x
    return Lambda(fn), (_randn(32), _randn(32, seed=1))


def aliasing_outputs():
    def fn(m, x):
        y = x * 2
        return x, x.view(4, 8), y, y.t(), y[1:3]
    return Lambda(fn), (_randn(8, 4),)


def as_strided_output():
    return Lambda(lambda m, x: torch.as_strided(x * 3, (4, 4), (1, 4))), (_randn(16),)


def nested_outputs():
    def fn(m, x):
        return {"a": [x + 1, (x * 2, {"b": x.sum()})], "c": x.relu()}
    return Lambda(fn), (_randn(10),)


def indexing():
    def fn(m, x, idx, emb_idx):
        return (
            torch.gather(x, 1, idx),
            x.index_select(0, idx[:, 0]),
            F.embedding(emb_idx, m.table),
            torch.where(x > 0, x, -x),
            x.masked_fill(x < -0.5, 0.25),
        )
    return Lambda(fn, table=_randn(50, 16, seed=2)), (
        _randn(10, 12),
        torch.randint(0, 10, (10, 3)),
        torch.randint(0, 50, (7,)),
    )


def scatter_index_put():
    def fn(m, x, idx, src, pos, vals):
        a = torch.zeros(10, 5, device=x.device).scatter_add(0, idx, src)
        b = x.index_put((pos,), vals, accumulate=True)
        return a + 1, b * 2
    return Lambda(fn), (
        _randn(20, 5),
        torch.randint(0, 10, (6, 5)),
        _randn(6, 5, seed=1),
        torch.randint(0, 20, (9,)),
        _randn(9, 5, seed=2),
    )


def cat_stack_split_pad():
    def fn(m, a, b):
        c = torch.cat([a, b], 0)
        s = torch.stack([a, b], -1)
        x, y = c.split([3, 7], 0)
        return F.pad(x, (1, 2)), y * 2, s.sum(-1)
    return Lambda(fn), (_randn(5, 6), _randn(5, 6, seed=1))


def matmuls():
    def fn(m, a, b, c, bias):
        return a @ b, torch.addmm(bias, a, b), torch.bmm(c, c.transpose(1, 2)), torch.baddbmm(c, c, c)
    return Lambda(fn), (_randn(16, 32), _randn(32, 8, seed=1), _randn(3, 4, 4, seed=2), _randn(8, seed=3))


class _ConvRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        with torch.no_grad():  # the same weights in every process: the GPU test rebuilds the model
            self.conv.weight.copy_(_randn(8, 3, 3, 3, seed=4) * 0.3)
            self.conv.bias.copy_(_randn(8, seed=5))

    def forward(self, x):
        return F.relu(self.conv(x)) + 1


def convolution():
    return _ConvRelu().eval(), (_randn(2, 3, 12, 12),)


def attention():
    def fn(m, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2
    return Lambda(fn), tuple(_randn(2, 4, 32, 16, dtype=torch.bfloat16, seed=i) for i in range(3))


def attention_fp32_mask():
    def fn(m, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return Lambda(fn), tuple(_randn(1, 2, 16, 8, seed=i) for i in range(3)) + (_randn(1, 2, 16, 16, seed=5),)


def aten_fallback():
    return Lambda(lambda m, x: torch.linalg.det(x) + 1), (_randn(4, 3, 3) + torch.eye(3) * 3,)


def buffers_and_constants():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("persistent", _randn(12))
            self.register_buffer("scratch", _randn(12, seed=1), persistent=False)
            self.scale = 2.5

        def forward(self, x):
            return (x * self.persistent + self.scratch * self.scale
                    + torch.tensor([1.0, 2.0, 3.0], device=x.device).repeat(4))

    return M(), (_randn(12, seed=2),)


def random_ops():
    def fn(m, x):
        return x + torch.rand_like(x), torch.randn(64, 64, device=x.device), F.dropout(x, 0.5, training=False)
    return Lambda(fn), (_randn(64, 64),)


def data_dependent_shape():
    return Lambda(lambda m, x: x[x > 0]), (_randn(16),)


def host_sync_item():
    return Lambda(lambda m, x: x * float(x.sum().item())), (_randn(16),)


SUPPORTED = {
    f.__name__: f
    for f in (
        pointwise_1d, pointwise_2d_transposed, pointwise_3d_permuted, broadcasting, dtype_mix, zero_dim,
        reductions, looped_inner_reduction, outer_reduction, split_reduction, mixed_order_reduction, welford,
        batch_norm_eval, scan, sort,
        many_independent_reductions_and_pointwise, mixed_tiling_combo, inplace_input_mutation, aliasing_outputs,
        as_strided_output, nested_outputs, indexing, scatter_index_put, cat_stack_split_pad, matmuls, convolution,
        attention, attention_fp32_mask, aten_fallback, buffers_and_constants,
    )
}
RANDOM = {"random_ops": random_ops}
UNSUPPORTED = {f.__name__: f for f in (data_dependent_shape, host_sync_item)}
