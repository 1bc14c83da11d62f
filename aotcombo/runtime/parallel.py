"""A tensor-parallel package's rank: its process group, checked, and its slices of the weights.

Every rank runs the same program on its 1/world_size slice of each split weight
(``Weight.shard_dim``), and the program's collectives run over torch.distributed's default
group, which the caller initialises before ``load()`` (``torchrun``, then
``torch.distributed.init_process_group("nccl")``). The package, and ``load(weights=...)``,
hold whole tensors: each rank cuts its slice, so no one writes shard files.
"""

from __future__ import annotations

import os

import torch

from .manifest import Manifest, Weight


def check_group(manifest: Manifest, device: torch.device, rank: int | None, world_size: int | None) -> int | None:
    """This process's rank in the default group, checked against the package's build (None: a
    package for one GPU, loaded as one). Raises naming the problem and its fix."""
    import torch.distributed as dist

    built = manifest.world_size
    if built == 1:
        if world_size not in (None, 1) or rank not in (None, 0):
            raise ValueError(f"package {manifest.name} runs on one GPU; load(rank={rank}, world_size={world_size}) "
                             "asks for tensor parallel: rebuild it with --tensor-parallel N")
        return None
    run = f"run it under torchrun --nproc-per-node {built}"
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"package {manifest.name} runs tensor-parallel over {built} GPUs, and torch.distributed "
                           f"is not initialised in this process: {run}, and call "
                           "torch.distributed.init_process_group('nccl') before load()")
    backend = dist.get_backend()
    if device.type == "cuda" and backend != "nccl":
        raise RuntimeError(f"package {manifest.name}: the default process group's backend is {backend!r}; its "
                           "collectives run on the GPU: call torch.distributed.init_process_group('nccl')")
    group_size, group_rank = dist.get_world_size(), dist.get_rank()
    if group_size != built or world_size not in (None, built):
        asked = f"load(world_size={world_size})" if world_size not in (None, built) else \
            f"the process group has {group_size} ranks"
        raise ValueError(f"package {manifest.name} was built for {built} tensor-parallel ranks, and {asked}: "
                         f"{run}, or rebuild with --tensor-parallel {group_size}")
    if rank is not None and rank != group_rank:
        raise ValueError(f"load(rank={rank}) in the process of rank {group_rank}: leave rank out (each process "
                         "loads as its own rank)")
    if device.type == "cuda" and torch.cuda.device_count() < min(built, _local_ranks(built)):
        raise RuntimeError(f"package {manifest.name} needs {built} GPUs; this machine has "
                           f"{torch.cuda.device_count()}")
    return group_rank


def _local_ranks(built: int) -> int:
    """The ranks on this machine (torchrun's LOCAL_WORLD_SIZE), else all of them."""
    try:
        return int(os.environ.get("LOCAL_WORLD_SIZE", built))
    except ValueError:
        return built


def group_name() -> str:
    import torch.distributed as dist

    return dist.group.WORLD.group_name


def whole_shape(weight: Weight, world: int, part_rows: int | None = None) -> tuple[int, ...]:
    """The whole tensor's shape of ``weight`` (one of its parts', given ``part_rows``)."""
    shape = list(weight.shape if part_rows is None else (part_rows, *weight.shape[1:]))
    if weight.shard_dim is not None:
        shape[weight.shard_dim] *= world
    return tuple(shape)


def rank_slice(weight: Weight, whole: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s slice of the whole ``weight``, dense (the program reads it through the
    strides of a whole tensor of its shape); a weight combined from several tensors along
    dim 0 and split along it is cut part by part (its rows are each part's slice)."""
    dim = weight.shard_dim
    if dim is None:
        return whole
    if dim == 0 and weight.parts:
        pieces = whole.split([rows * world for rows in weight.part_rows])
        return torch.cat([p.narrow(0, rank * rows, rows) for p, rows in zip(pieces, weight.part_rows)])
    size = weight.shape[dim]
    return whole.narrow(dim, rank * size, size).contiguous()


def part_slice(weight: Weight, whole_part: torch.Tensor, rows: int, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s slice of one whole part (``rows`` of the slice) of a combined weight."""
    dim = weight.shard_dim
    if dim is None:
        return whole_part
    size = rows if dim == 0 else weight.shape[dim]
    return whole_part.narrow(dim, rank * size, size).contiguous()
