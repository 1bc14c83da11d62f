"""The model as rank 0 of ``world`` sees it: each planned layer holds its slice of the weights
and calls the collective that makes its output whole; the same program serves every rank.

- a column-wise linear keeps its 1/world of the output features (weight and bias rows): its
  output is this rank's slice of the features (``colwise_rep``: gathered from every rank);
- a row-wise linear keeps its 1/world of the input features (weight columns), reads the slice
  a column-wise layer left, and sums the ranks' partial outputs (an all-reduce) before its bias;
- a buffer planned ``Shard(d)`` (a KV cache by heads) keeps its slice along ``d`` in place,
  so the other holders of that tensor (transformers' cache layers) see the slice too.

Nothing here depends on the rank: every rank's program is rank 0's, run on its own slices
(``runtime/parallel.py`` cuts them at load from the whole tensors the package holds).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from ...errors import UsageError
from ..kernels.linear import combine as linears
from ..trace import collectives
from . import plan as plans


@dataclass
class Sharding:
    """What ``shard_model`` did: each split tensor's dim by its name, and the whole tensors
    (the package holds those; every rank cuts its slice at load)."""

    world: int
    dims: dict[str, int] = field(default_factory=dict)
    whole: dict[str, torch.Tensor] = field(default_factory=dict)
    layers: tuple[tuple[str, str], ...] = ()  # (module name, kind), for the trace cache's key

    @property
    def key(self) -> tuple:
        return ("tensor-parallel", self.world, self.layers, tuple(sorted(self.dims.items())))

    def dims_of(self, named: dict) -> dict[str, int]:
        """The split dim of each of the program's weights that is split (a combined weight's:
        its parts', which must agree)."""
        dims = {}
        for name in named:
            found = {self.dims.get(p) for p in linears.parts(name) or [name] if linears.zero_rows(p) is None}
            if len(found) > 1:
                raise UsageError(f"tensor parallel: the linears {', '.join(linears.parts(name))} read one input and "
                                 "are combined into one, but the plan splits them differently",
                                 fix="split every linear reading the same input the same way in the plan")
            dim = found.pop()
            if dim is not None:
                dims[name] = dim
        return dims

    def whole_of(self, name: str, local: torch.Tensor) -> torch.Tensor:
        """The whole tensor of the program's weight ``name`` (``local``: rank 0's)."""
        parts = linears.parts(name)
        if parts is None:
            return self.whole.get(name, local)
        if not any(p in self.whole for p in parts):
            return local
        rows = {p: linears.zero_rows(p) for p in parts}
        return torch.cat([self.whole[p] if rows[p] is None else local.new_zeros(rows[p] * self.world, *local.shape[1:])
                          for p in parts])


def shard_model(model: nn.Module, plan: dict | None, world: int) -> Sharding:
    """Split ``model`` in place for rank 0 of ``world`` by ``plan`` (None: ``plan.default_plan``)."""
    planned = plans.entries(model, plans.default_plan(model) if plan is None else plan)
    sharding = Sharding(world)
    modules = dict(model.named_modules())
    layers = []
    for entry in planned:
        if entry.kind == plans.REPLICATED:
            continue
        if entry.kind == plans.SHARDED:
            _shard_buffer(model, entry.name, entry.dim, sharding)
            continue
        module, dim = modules[entry.name], 0 if entry.kind in (plans.COLUMN, plans.GATHERED) else 1
        _shard_parameter(module, "weight", f"{entry.name}.weight", dim, sharding)
        if module.bias is not None and entry.kind != plans.ROW:
            _shard_parameter(module, "bias", f"{entry.name}.bias", 0, sharding)
        module.forward = _FORWARDS[entry.kind].__get__(module)
        layers.append((entry.name, entry.kind))
    sharding.layers = tuple(layers)
    return sharding


def _slice(name: str, tensor: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    size = tensor.shape[dim]
    if size % world:
        raise UsageError(f"--tensor-parallel {world}: {name} has {size} along dim {dim}, which {world} ranks "
                         "cannot split evenly", fix=f"build with a --tensor-parallel that divides {size}")
    # Contiguous strides on every dim, size-1 ones too: a KV cache's slice along its heads keeps the
    # whole cache's batch stride under clone()'s preserve_format, and Inductor then sees the
    # cache's update as another layout than the buffer's, copies the whole cache and writes it back.
    return tensor.detach().narrow(dim, 0, size // world).clone(memory_format=torch.contiguous_format)


def _shard_parameter(module: nn.Module, attribute: str, name: str, dim: int, sharding: Sharding) -> None:
    """A new parameter, not the old one cut in place: a tied tensor (an embedding sharing the
    LM head's weight) stays whole where it is not split."""
    whole = getattr(module, attribute)
    setattr(module, attribute, nn.Parameter(_slice(name, whole, dim, sharding.world), requires_grad=False))
    sharding.dims[name], sharding.whole[name] = dim, whole.detach()


def _shard_buffer(model: nn.Module, name: str, dim: int, sharding: Sharding) -> None:
    tensor = operator.attrgetter(name)(model)
    sharding.whole[name] = tensor.detach().clone()
    with torch.no_grad():
        tensor.data = _slice(name, tensor, dim, sharding.world)  # in place: its other holders see the slice
    sharding.dims[name] = dim


def _column(self: nn.Linear, x):
    return F.linear(x, self.weight, self.bias)


def _gathered(self: nn.Linear, x):
    return collectives.gather_last_dim(F.linear(x, self.weight, self.bias))


def _row(self: nn.Linear, x):
    out = collectives.sum_over_ranks(F.linear(x, self.weight))
    return out if self.bias is None else out + self.bias


_FORWARDS = {plans.COLUMN: _column, plans.GATHERED: _gathered, plans.ROW: _row}
