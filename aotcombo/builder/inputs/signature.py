"""The names a user calls a model's inputs by: ``forward``'s own parameter names.

``input_names(model, n)`` binds ``n`` positional example inputs to ``forward``'s signature:
``forward(self, input_ids, attention_mask)`` gives ``("input_ids", "attention_mask")``; the
inputs a ``*xs`` parameter collects are ``xs[0]``, ``xs[1]``... (not identifiers: those can
only be passed by position). A package's manifest, docstring and errors use these names,
and its model takes the identifiers as keywords too.
"""

from __future__ import annotations

import inspect

import torch

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def input_names(model: torch.nn.Module, n: int) -> tuple[str, ...]:
    """The names of ``model``'s first ``n`` positional inputs (``input0``... where forward's
    signature cannot be read)."""
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return tuple(f"input{i}" for i in range(n))
    names: list[str] = []
    for p in parameters:
        if len(names) == n:
            break
        if p.kind in _POSITIONAL:
            names.append(p.name)
        elif p.kind == inspect.Parameter.VAR_POSITIONAL:
            names.extend(f"{p.name}[{i}]" for i in range(n - len(names)))
    names.extend(f"input{i}" for i in range(len(names), n))
    return tuple(names)
