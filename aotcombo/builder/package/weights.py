"""Which of the model's tensors the package holds, and which come at load time.

``--weights external``: the model's ``state_dict`` comes at load time; tensors outside it
(non-persistent buffers, constants the trace lifted) stay in the package, and a combined
weight (``kernels/linear/combine``) is external when all the tensors it is made of are.

A model may hold its parameters on the meta device (shapes and dtypes, no bytes: an 8B
model built on a machine that cannot hold it): only ``--weights external`` builds it, and
only if every tensor the package would hold has values (``check_meta``, before the trace)."""

from __future__ import annotations

import torch

from ...errors import UsageError
from ..inputs.modelfile import on_meta
from ..kernels.linear import combine as linears

_SHOWN = 3  # names shown in a message


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def check_meta(model: torch.nn.Module, policy: str) -> None:
    """Before any trace: a model with tensors on the meta device builds only with
    ``--weights external``, and only with those tensors in its ``state_dict`` (given at load)."""
    meta = on_meta(model)
    if not meta:
        return
    if policy != "external":
        raise UsageError(
            f"{len(meta)} of the model's tensors are on the meta device ({_listed(meta)}): they have no "
            "values, and --weights packaged puts the weights' values in the package",
            fix="build with --weights external (load(weights=model.state_dict()) gives them on the GPU), or "
                "make the model with real tensors")
    state_dict = model.state_dict(keep_vars=True)
    outside = [name for name in meta if name not in state_dict]
    if outside:
        raise UsageError(
            f"the model's buffer(s) {_listed(outside)} are on the meta device but not in its state_dict: "
            "the package holds such tensors itself, so it needs their values",
            fix="make only the parameters (and persistent buffers) on the meta device, the other buffers on the "
                "CPU (as sample_models/full_size/_wrappers.parameters_on_meta does)")


def split(model: torch.nn.Module, named: dict, policy: str) -> tuple[set[str], list[torch.Tensor], dict[str, int]]:
    """``(external names, packaged tensors in program order, rows of each part of a combined
    weight)`` for the weights ``named`` under ``policy`` ("packaged" or "external")."""
    state_dict = model.state_dict(keep_vars=True)
    given = {name for name in named if all(p in state_dict or linears.zero_rows(p) is not None
                                           for p in linears.parts(name) or [name])}  # zeros: made at load
    external = given if policy == "external" else set()
    packaged = [t for name, t in named.items() if name not in external]
    valueless = [name for name, t in named.items() if name not in external and t.device.type == "meta"]
    if valueless:
        raise UsageError(
            f"the package would hold {_listed(valueless)}, on the meta device: a tensor without values",
            fix="make it a real tensor (on the CPU), or a parameter or persistent buffer of the model with "
                "--weights external")
    rows = {p: linears.zero_rows(p) or state_dict[p].shape[0] for name in named for p in linears.parts(name) or ()}
    return external, packaged, rows
