"""Which of the model's layers and tensors are split across tensor-parallel ranks, and how.

A plan is what torch's ``parallelize_module`` takes: module names (``*`` matches one dotted
part, as there) mapped to ``ColwiseParallel()`` / ``RowwiseParallel()``, or to the names
transformers' ``tp_plan`` uses for them (``"colwise"``, ``"rowwise"``, ``"colwise_rep"``: a
column-wise layer whose outputs are gathered). aotcombo adds one kind of entry: a buffer's
name mapped to a placement, ``Shard(1)`` (a KV cache split by heads) or ``Replicate()``.

The model file's ``get_tp_plan()`` gives it; without one, ``default_plan`` finds the layers
of Llama-style blocks by their names (transformers', and Meta's ``wq``/``w1``/... ones).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import torch
from torch import nn

from ...errors import UsageError

COLUMN, ROW, GATHERED, SHARDED, REPLICATED = "colwise", "rowwise", "colwise_rep", "shard", "replicate"

DEFAULT_COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "wq", "wk", "wv", "w1", "w3")
DEFAULT_ROW = ("o_proj", "down_proj", "wo", "w2")
DEFAULT_GATHERED = ("lm_head",)
CACHE_PATTERNS = ("key_cache_*", "value_cache_*", "k_cache", "v_cache")  # [batch, heads, positions, dim]


@dataclass(frozen=True)
class Entry:
    """One planned name: a module's (``kind`` colwise, rowwise or colwise_rep) or a tensor's
    (``kind`` shard along ``dim``, or replicate)."""

    name: str
    kind: str
    dim: int | None = None


def default_plan(model: nn.Module) -> dict[str, object]:
    """The plan for Llama-style blocks: attention's q/k/v and the MLP's gate/up column-wise,
    attention's output and the MLP's down row-wise, the LM head column-wise with its logits
    gathered, and KV-cache buffers split by their heads (dim 1)."""
    plan: dict[str, object] = {}
    for name, module in model.named_modules():
        last = name.rpartition(".")[2]
        if not isinstance(module, nn.Linear):
            continue
        for kind, names in ((COLUMN, DEFAULT_COLUMN), (ROW, DEFAULT_ROW), (GATHERED, DEFAULT_GATHERED)):
            if last in names:
                plan[name] = kind
    for name, _ in model.named_buffers():
        if any(fnmatch.fnmatchcase(name.rpartition(".")[2], p) for p in CACHE_PATTERNS):
            plan[name] = ("shard", 1)
    if not any(kind == ROW for kind in plan.values()):
        raise UsageError(
            "--tensor-parallel: the model has no layer the default plan splits (Llama-style blocks: linears named "
            f"{', '.join(DEFAULT_COLUMN[:5])} column-wise, {', '.join(DEFAULT_ROW[:2])} row-wise)",
            fix="define get_tp_plan() in the model file, returning a torch parallelize_module plan "
                "({'layers.*.attn.qkv': ColwiseParallel(), 'layers.*.attn.out': RowwiseParallel(), ...})")
    return plan


def entries(model: nn.Module, plan: dict) -> list[Entry]:
    """The plan's entries resolved to the model's modules and tensors, each checked."""
    if not isinstance(plan, dict) or not plan:
        raise UsageError(f"get_tp_plan() returned {type(plan).__name__} {plan!r:.80}, not a plan",
                         fix="return a dict of module names to ColwiseParallel() / RowwiseParallel(), as "
                             "torch's parallelize_module takes")
    modules = dict(model.named_modules())
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    found: dict[str, Entry] = {}
    for pattern, style in plan.items():
        names = [n for n in modules if _matches(pattern, n)] or [n for n in tensors if _matches(pattern, n)]
        if not names:
            raise UsageError(f"tensor-parallel plan entry {pattern!r} names no module or tensor of the model",
                             fix="use the names model.named_modules() gives, '*' for one dotted part")
        for name in names:
            found[name] = _entry(name, style, modules.get(name), tensors.get(name))
    return list(found.values())


def _matches(pattern: str, name: str) -> bool:
    """torch's parallelize_module rule: the dotted parts match one for one, ``*`` within a part."""
    parts, atoms = pattern.split("."), name.split(".")
    return len(parts) == len(atoms) and all(fnmatch.fnmatchcase(a, p) for a, p in zip(atoms, parts))


def _entry(name: str, style, module: nn.Module | None, tensor: torch.Tensor | None) -> Entry:
    from torch.distributed.tensor import Replicate, Shard

    if module is not None:
        kind = style if isinstance(style, str) else _style_kind(style)
        if kind not in (COLUMN, ROW, GATHERED):
            raise UsageError(f"tensor-parallel plan entry {name!r}: {style!r} is not a layer style aotcombo splits",
                             fix="use ColwiseParallel(), ColwiseParallel(output_layouts=Replicate()) or "
                                 "RowwiseParallel() (or 'colwise', 'colwise_rep', 'rowwise')")
        if not isinstance(module, nn.Linear):
            raise UsageError(f"tensor-parallel plan entry {name!r} is a {type(module).__name__}; aotcombo splits "
                             "nn.Linear layers", fix="name the linears inside it, or leave it out of the plan")
        return Entry(name, kind)
    if isinstance(style, tuple) and style[0] == SHARDED:
        return Entry(name, SHARDED, style[1] % tensor.dim())
    if isinstance(style, Shard):
        return Entry(name, SHARDED, style.dim % tensor.dim())
    if isinstance(style, Replicate) or style == REPLICATED:
        return Entry(name, REPLICATED)
    raise UsageError(f"tensor-parallel plan entry {name!r} is a tensor; it takes Shard(dim) or Replicate(), "
                     f"not {style!r}", fix="map a tensor to Shard(dim) or Replicate(), a layer to a ParallelStyle")


def _style_kind(style) -> str | None:
    """A torch ParallelStyle as colwise, colwise_rep or rowwise; None for one aotcombo cannot split
    (sequence parallel, inputs or outputs laid out otherwise)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    inputs, outputs = getattr(style, "input_layouts", None), getattr(style, "output_layouts", None)
    if type(style) is ColwiseParallel and inputs == (Replicate(),):
        if outputs == (Shard(-1),):
            return COLUMN
        if outputs == (Replicate(),):
            return GATHERED
    if type(style) is RowwiseParallel and outputs == (Replicate(),) and inputs == (Shard(-1),):
        return ROW
    return None
