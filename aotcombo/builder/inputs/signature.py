"""The names a user calls a model's inputs by: ``forward``'s own parameter names.

``input_names(model, n)`` binds ``n`` positional example inputs to ``forward``'s signature:
``forward(self, input_ids, attention_mask)`` gives ``("input_ids", "attention_mask")``; the
inputs a ``*xs`` parameter collects are ``xs[0]``, ``xs[1]``... (not identifiers: those can
only be passed by position). A package's manifest, docstring and errors use these names,
and its model takes the identifiers as keywords too.
"""

from __future__ import annotations

import inspect
import re

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


_NOT_AN_OBJECT = re.compile(r"'(?:Fake)?Tensor' object has no attribute '(\w+)'")


def misplaced_input(model: torch.nn.Module, exc: BaseException, n: int) -> str | None:
    """The fix for a model that failed because an example input reached a parameter that takes
    no tensor (a tensor has no ``.get_seq_length``: an attention mask passed by position where
    forward takes a cache), naming how the ``n`` inputs bind to forward; None for other failures."""
    found = _NOT_AN_OBJECT.search(str(exc)) if isinstance(exc, AttributeError) else None
    if found is None or not n:
        return None
    try:
        every = [p.name for p in inspect.signature(model.forward).parameters.values() if p.kind in _POSITIONAL]
    except (TypeError, ValueError):
        every = []
    given = input_names(model, n)
    shown = ", ".join(every[:6]) + (", ..." if len(every) > 6 else "") if every else ", ".join(given)
    return (f"a tensor reached code that wants another kind of object (one with .{found.group(1)}): the "
            f"{n} example input{'s' if n > 1 else ''} go to forward({shown}) by position, so to "
            f"{', '.join(given)}; if forward takes other parameters before those you pass, give them by name: "
            "return from get_example_inputs() a dict keyed by forward's parameter names ({'input_ids': ..., "
            "'attention_mask': ...}), or from get_model() a wrapper whose forward takes just your tensors and "
            "passes them on by name")
