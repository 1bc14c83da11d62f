"""A trace as plain data: what the build cache stores, and what a child process tracing beside
the build's (``forked``) sends back.

An entry holds the plain-data graph, the nesting of the model's outputs and the values of the
constants the trace lifted out of ``forward``. The weights themselves are never in it: they are
the model's, taken again from the model being built (``weights_of``), the combined ones of
fused linears made again from their parts.
"""

from __future__ import annotations

import operator

import torch

from ..kernels.linear import combine as linears


def entry_of(model, graph, weights: dict, structure) -> dict:
    """The plain-data entry of a trace (``weights``: its weights by name, as traced)."""
    return {"graph": graph, "structure": structure, "constants": lifted_constants(model, weights)}


def weights_of(model, graph, constants: dict) -> dict | None:
    """The model's tensors for the graph's weight inputs (None if one is missing).

    ``constants``: the entry's, for the weights that are not attributes of the model."""
    weights = {}
    for i in graph.inputs:
        if i.kind != "weight":
            continue
        try:
            weights[i.key] = linears.combined(model, i.key) if linears.parts(i.key) else \
                operator.attrgetter(i.key)(model).detach()
        except AttributeError:
            if i.key not in constants:
                return None
            weights[i.key] = _tensor_from_plain(constants[i.key])
    return weights


def lifted_constants(model, weights: dict) -> dict:
    """The weights a trace found that are not attributes of the model, as plain data."""
    out = {}
    for key, tensor in weights.items():
        if linears.parts(key):  # made from the model's own tensors at each build
            continue
        try:
            operator.attrgetter(key)(model)
        except AttributeError:
            t = tensor.detach().contiguous()
            out[key] = (str(t.dtype).removeprefix("torch."), tuple(t.shape),
                        t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return out


def _tensor_from_plain(plain) -> torch.Tensor:
    dtype, shape, data = plain
    dtype = getattr(torch, dtype)
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape).clone()
