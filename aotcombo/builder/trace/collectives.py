"""Collectives in a traced program, and the process group the trace runs them in.

A tensor-parallel layer (``builder/parallel/shard.py``) calls torch's functional collectives,
which export records as ``_c10d_functional`` ops and Inductor keeps as extern calls; the
package's program makes the same calls over the group ``load()`` finds (NCCL on GPUs). The
build has one process and no GPU: it traces rank 0 in torch's fake process group, which
answers every collective without peers (its values are never read: the trace runs on fake
tensors).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from ...errors import UsageError

# The functional collectives a package's program may call, by op name.
PACKAGED = frozenset({"all_reduce", "all_reduce_", "all_gather_into_tensor", "all_gather_into_tensor_out",
                      "wait_tensor"})


@contextlib.contextmanager
def fake_process_group(world: int):
    """torch.distributed initialised as rank 0 of ``world`` in the fake backend, for a trace."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UsageError("--tensor-parallel builds in a process where torch.distributed is already initialised",
                         fix="build in a plain process (not under torchrun); the package runs under torchrun")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def sum_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The sum of every rank's ``t`` (an all-reduce)."""
    from torch.distributed import _functional_collectives as funcol

    return funcol.all_reduce(t, "sum", dist.group.WORLD)


def gather_last_dim(t: torch.Tensor) -> torch.Tensor:
    """Every rank's ``t`` side by side along the last dim, rank 0's first (an all-gather)."""
    from torch.distributed import _functional_collectives as funcol

    return funcol.all_gather_tensor(t.contiguous(), gather_dim=t.dim() - 1, group=dist.group.WORLD)


def group_name() -> str:
    """The name of the process group collectives run in (the whole world's)."""
    return dist.group.WORLD.group_name
