"""Which of the model's tensors the package holds, and which come at load time.

``--weights external``: the model's ``state_dict`` comes at load time; tensors outside it
(non-persistent buffers, constants the trace lifted) stay in the package, and a combined
weight (``kernels/linear/combine``) is external when all the tensors it is made of are."""

from __future__ import annotations

import torch

from ..kernels.linear import combine as linears


def split(model: torch.nn.Module, named: dict, policy: str) -> tuple[set[str], list[torch.Tensor], dict[str, int]]:
    """``(external names, packaged tensors in program order, rows of each part of a combined
    weight)`` for the weights ``named`` under ``policy`` ("packaged" or "external")."""
    state_dict = model.state_dict()
    external = {name for name in named if all(p in state_dict for p in linears.parts(name) or [name])} \
        if policy == "external" else set()
    packaged = [t for name, t in named.items() if name not in external]
    rows = {p: state_dict[p].shape[0] for name in named for p in linears.parts(name) or ()}
    return external, packaged, rows
