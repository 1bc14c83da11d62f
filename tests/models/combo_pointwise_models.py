"""The combo corpus's pointwise models (``combo_test_models``): PyTorch's test functions of
element-wise ops (activations, in-place updates, adds over transposed views, channels-last
copies, a bucketize), and the inputs factories that only they take."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aotcombo.testing.corpora import load

Draw = load("combo_case").Draw  # the corpus loads by path (aotcombo.testing.corpora), not from sys.path


def activations(a, b, c):
    return F.relu(a), torch.sigmoid(b), torch.tanh(c)


def mutated(a, b, c, d):
    a.add_(1)
    b.sigmoid_()
    c = torch.add(c, 5)
    d.tanh_()
    return a, b, c, d


def add3(a0, a1, a2, b0, b1, b2):
    return torch.add(a0, b0), torch.add(a1, b1), torch.add(a2, b2)


def add_one_each(a, b):
    return torch.add(a, 1), torch.add(b, 1)


def mul2_add1(a, b):
    return a * 2.0, b + 1.0


def add1_mul2(a, b):
    return a + 1.0, b * 2.0


def channels_last(*ts):
    return tuple(t.contiguous(memory_format=torch.channels_last) for t in ts)


def sin_cos(x, y):
    return x.sin(), y.cos()


def six_pointwise(a, b, c, d, e, f):
    return a * 2.0, b + 1.0, c.sin(), d.cos(), e.exp(), f.neg()


def yz_overflow(a, b):
    a_view = a.permute(0, 2, 1).clone(memory_format=torch.contiguous_format).view(-1, a.shape[1])
    b_view = b.permute(0, 2, 1).clone(memory_format=torch.contiguous_format).view(-1, b.shape[1])
    return a_view, b_view


def three_pointwise(a, b, c):
    return a * 2.0, b + 1.0, c - 1.0


def bucketize_carve_out(a, b, c, boundaries):
    return torch.bucketize(a, boundaries), b * 2.0, c + 1.0


def relu_sigmoid(a, b):
    return torch.relu(a), torch.sigmoid(b)


def relu_sigmoid_tanh(a, b, c):
    return torch.relu(a), torch.sigmoid(b), torch.tanh(c)


def cos_sin_exp_neg(a, b, c, d):
    return a.cos(), b.sin(), c.exp(), d.neg()


def blocking_2d_inputs(seed, batch=30):
    d = Draw(seed)
    return (d.rand(batch, 20), d.rand(40, 30), d.rand(36, 40), d.rand(batch, 20), d.rand(30, 40).t(),
            d.rand(40, 36).t())


def blocking_2d_round_robin_inputs(seed, batch=20):
    d = Draw(seed)
    return (d.rand(batch, 30), d.rand(30, 30), d.rand(40, 32), d.rand(30, batch).t(), d.rand(30, 30).t(),
            d.rand(32, 40).t())


def poi_3d_inputs(seed):
    d = Draw(seed)
    return d.randn(16, 16, 16)[:8, :8, :8], d.randn(16, 16, 16)[:8, :8, :8]


def bucketize_inputs(seed):
    d = Draw(seed)
    boundaries = d.rand(3).sort().values if seed is not None else torch.empty(3)
    return d.rand(1024), d.rand(1024), d.rand(1024), boundaries
