"""Tensor-parallel packages on GPUs: a rank's setup under torchrun, eager's state cut as the
package's, and torch's own tensor parallel of the same model for comparison.

Used by ``tests/gpu/tensor_parallel_worker.py`` (correctness) and ``benchmarks/tp_bench.py``
(timing), both started by ``torchrun --nproc-per-node N``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_rank() -> tuple[int, int, torch.device]:
    """This process's rank and world size under torchrun, its GPU made current, NCCL up."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    return rank, world, device


def rank_view(manifest, name: str, whole: torch.Tensor, rank: int) -> torch.Tensor:
    """``whole`` (eager's tensor ``name``) cut as rank ``rank`` of the package holds it."""
    from ..runtime.parallel import rank_slice

    weight = next(w for w in manifest.weights.tensors if w.name == name)
    return rank_slice(weight, whole, rank, manifest.world_size)


def torch_tensor_parallel(model: torch.nn.Module, world: int, device: torch.device) -> torch.nn.Module:
    """``model`` split in place by torch's own API (``parallelize_module`` over a 1-D device
    mesh, DTensor layers) with aotcombo's default plan: column-wise q/k/v and gate/up, row-wise
    o/down, the LM head column-wise with its logits gathered; KV-cache buffers cut by heads in
    place (torch has no style for a buffer), as the package's are."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from ..builder.parallel import plan as plans

    styles = {plans.COLUMN: ColwiseParallel(), plans.ROW: RowwiseParallel(),
              plans.GATHERED: ColwiseParallel(output_layouts=Replicate())}
    mesh = init_device_mesh("cuda", (world,))
    plan = plans.default_plan(model)
    rank = dist.get_rank()
    buffers = dict(model.named_buffers())
    with torch.no_grad():
        for name, style in plan.items():
            if isinstance(style, tuple):  # ("shard", dim): a cache buffer
                t = buffers[name]
                size = t.shape[style[1]] // world
                t.data = t.narrow(style[1], rank * size, size).clone()
    return parallelize_module(model, mesh, {n: styles[s] for n, s in plan.items() if not isinstance(s, tuple)})
