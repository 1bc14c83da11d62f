"""A case of the combo corpus (``combo_test_models``): the ``Case`` record (a model and an
inputs factory), ``Fn`` (a module running a plain function, as PyTorch's tests compile them),
``fn_case`` and the inputs factories' parts: ``Draw`` (seeded random tensors, or uninitialized
ones of the same shapes) and ``shapes`` (one tensor a shape)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


class Draw:
    """Random tensors from one seeded generator; ``seed=None``: uninitialized tensors."""

    def __init__(self, seed: int | None):
        self.g = None if seed is None else torch.Generator().manual_seed(seed)

    def rand(self, *shape, dtype=torch.float32):
        if self.g is None:
            return torch.empty(shape, dtype=dtype)
        return torch.rand(shape, generator=self.g).to(dtype)

    def randn(self, *shape, dtype=torch.float32):
        if self.g is None:
            return torch.empty(shape, dtype=dtype)
        return torch.randn(shape, generator=self.g).to(dtype)

    def randint(self, low, high, shape, dtype=torch.int64):
        if self.g is None:
            return torch.empty(shape, dtype=dtype)
        return torch.randint(low, high, shape, generator=self.g, dtype=dtype)

    def mask(self, *shape):
        if self.g is None:
            return torch.empty(shape, dtype=torch.bool)
        return torch.rand(shape, generator=self.g) > 0.5


class Fn(nn.Module):
    """A module running ``fn`` (PyTorch's tests compile plain functions)."""

    def __init__(self, fn, **attrs):
        super().__init__()
        self.fn = fn
        for k, v in attrs.items():
            setattr(self, k, v)

    def forward(self, *xs):
        return self.fn(*xs)


@dataclass(frozen=True)
class Case:
    model: Callable[[], nn.Module]
    inputs: Callable[..., tuple]  # inputs(seed) (dynamic: inputs(seed, batch))
    tests: tuple[str, ...]  # the PyTorch tests it comes from
    small: Callable[[int | None], tuple] | None = None  # interpreter-sized inputs, when the real ones are too big
    small_model: Callable[[], nn.Module] | None = None  # the model for ``small``, when it differs
    dynamic: tuple[int, int] | None = None  # (min, max) of a dynamic batch
    check_batches: tuple[int, ...] = ()  # batch sizes the interpreter checks a dynamic build at
    slow: bool = False
    note: str = ""
    blocked: str = ""  # the build is known to fail for this reason (a bug tracked elsewhere)


def fn_case(fn, inputs, tests, **kw) -> Case:
    return Case(model=lambda: Fn(fn), inputs=inputs, tests=tuple(tests), **kw)


def shapes(*shapes, kind="rand"):
    """inputs(seed) drawing one tensor per shape."""
    def make(seed):
        d = Draw(seed)
        return tuple(getattr(d, kind)(*s) for s in shapes)
    return make
