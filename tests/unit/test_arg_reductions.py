"""``argmax`` / ``argmin`` over a long dimension of few rows, split in two stages before Inductor
(``trace/decompositions.py``): the same index as torch's one pass, ties, NaN and infinities
included, in every dtype it takes and along any dimension; left alone where it does not apply."""

import pytest
import torch

from aotcombo.builder.trace import decompositions as d

N = 128256  # Llama 3's vocabulary: not a multiple of the chunk (the last chunk padded)


def _cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, N, generator=g)
    ties = torch.zeros(2, N)
    ties[0, [5, 70000, N - 1]] = 3.0  # the first of equal maxima
    ties[1, [N - 1]] = -1.0
    nan = torch.randn(2, N, generator=g)
    nan[0, [9000, 100]] = float("nan")  # the first NaN, wherever the max is
    infs = torch.full((2, N), float("-inf"))
    infs[1, N - 2] = float("inf")
    ints = torch.randint(-1000, 1000, (4, N), generator=g, dtype=torch.int32)
    return [x, x.to(torch.bfloat16), x.half(), ties, nan, infs, ints]


@pytest.mark.parametrize("case", range(7))
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_split_matches_torch(case, op):
    x = _cases()[case]
    split = d.TABLE[getattr(torch.ops.aten, op).default]
    for dim, keepdim in ((-1, False), (1, True)):
        got = split(x, dim, keepdim)
        assert got is not NotImplemented
        assert torch.equal(got, getattr(torch, op)(x, dim=dim, keepdim=keepdim)), (dim, keepdim)
    y = x.t().contiguous()  # along dim 0
    assert torch.equal(split(y, 0), getattr(torch, op)(y, dim=0))


def test_short_rows_and_many_rows_stay_one_pass():
    split = d.TABLE[torch.ops.aten.argmax.default]
    assert split(torch.randn(4, 1000), -1) is NotImplemented
    assert split(torch.randn(d.ARG_SPLIT_MAX_ROWS + 1, d.ARG_SPLIT_MIN), -1) is NotImplemented
    assert split(torch.randn(2, N), None) is NotImplemented  # over every element: left to torch
