"""The combo corpus's reduction models (``combo_test_models``): PyTorch's test functions of
sums, means, norms, max/min with indices, sorts and a scan (some beside pointwise ops), and the
inputs factories that only they take."""

from __future__ import annotations

import torch

from aotcombo.testing.corpora import load

Draw = load("combo_case").Draw  # the corpus loads by path (aotcombo.testing.corpora), not from sys.path


def reduce_fns(a, b, c, d):
    return torch.sum(a, dim=0), torch.max(b, dim=0), torch.min(c, dim=0), torch.tanh(d)


def reduce_split(a, b):
    return torch.linalg.vector_norm(a), torch.sum(b, dim=0)


def max_min_rows(x, y):
    return x.max(1), y.min(1)


def row_sums(*xs):
    return tuple(x.sum(dim=-1) for x in xs)


def sort_tanh(a, b, c, d):
    return (torch.sort(a, dim=1).values, torch.sort(b, dim=1).values, torch.sort(c, dim=1).values, torch.tanh(d))


def mix_order(x, y, z):
    row_sum = x.sum(dim=1)
    col_sum = x.sum(dim=0)
    return row_sum.sum(), col_sum, y.sum(), z.sum()


def scalar_store_broadcast(a, b, c, d):
    scalar_sum = a + b
    return scalar_sum, c.sum(dim=1), (d * scalar_sum).sum()


def sums_0_2(a, b):
    return a.sum(dim=(0, 2)), b.sum(dim=(0, 2))


def sums_1_2(a, b):
    return a.sum(dim=(1, 2)), b.sum(dim=(1, 2))


def pointwise_and_reductions(a, b, c, d):
    return a * 2.0, b + 1.0, c.sum(dim=-1), d.mean(dim=-1)


def silu_add_sums(a, b, c, d):
    return (a * torch.sigmoid(a) + b).sum(dim=1), (c * torch.sigmoid(c) + d).sum(dim=1)


def sums_dim1(x, y):
    return x.sum(1), y.sum(1)


def sums_dim2(x, y):
    return x.sum(2), y.sum(2)


def sum_mean_max(x, y, z):
    return x.sum(1), y.mean(1), z.max(1)


def sum_mean_cumsum(x, y, z):
    return x.sum(1), y.mean(1), z.cumsum(1)


def full_sums(a, b):
    return a.sum(), b.sum()


def sum_mean_rows(x, y):
    return x.sum(dim=-1), y.mean(dim=-1)


def inner_outer(x, y):
    return x.sum(dim=-1), y.sum(dim=0)


def _rms_norm(x, w, eps=1e-6):
    v = x.pow(2).mean(-1, keepdim=True)
    return w * x * torch.rsqrt(v + eps)


def rms_norm_pair(a, wa, b, wb):
    return _rms_norm(a, wa), _rms_norm(b, wb)


def sort_inputs(seed):
    d = Draw(seed)
    return (d.randint(0, 1000, (10, 200)), d.randint(0, 1000, (20, 200)), d.randint(0, 1000, (10, 200)), d.rand(30, 8))


def scalar_inputs(seed):
    d = Draw(seed)
    return d.randn(), d.randn(), d.randn(2048, 2048), d.randn(2048, 1)


def r0_r1_inputs(seed):
    d = Draw(seed)
    return d.randn(32, 16, 64).permute(1, 0, 2), d.randn(32, 16, 64).permute(1, 0, 2)
