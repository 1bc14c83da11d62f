"""Dynamic axes in size classes: calls of a few tokens run a program of their own.

A package built with ``--dynamic`` whose axes' sizes multiply to a few tokens in some calls
(``batch * seq <= 8``: a short search query, a decode step) holds two programs over the same
axes: one whose linears are kernels of ours, sized for at most that many rows, with the norm
before them and the pointwise ops after them inside (launched early on sm_90), and one for every
size (cuBLAS's matmuls). ``SizeClasses`` reads the axes' sizes off each call's inputs and runs
the first class whose bound holds, else the program for every size. Each class is a model of its
own (op by op, or a CUDA graph per size: per_size.py) on the same weights and state.
"""

from __future__ import annotations

import math

import torch

from .inputs import bind


class SizeClasses:
    """``model(*inputs)`` runs the model of the inputs' size class. ``classes``: (most tokens,
    model), ascending; ``rest``: the model of every other call; ``where``: the (input, dim) each
    dynamic axis's size is read from."""

    def __init__(self, classes: list[tuple[int, object]], rest, where: tuple[tuple[int, int], ...]):
        self._classes, self._rest, self._where = classes, rest, where
        self.name, self.device, self.names, self.mutated = rest.name, rest.device, rest.names, rest.mutated

    def model_for(self, inputs: tuple):
        """The model that runs ``inputs`` (positional)."""
        try:
            tokens = math.prod(inputs[i].shape[d] for i, d in self._where)
        except (IndexError, AttributeError):  # the input check names what is wrong
            return self._rest
        for most, model in self._classes:
            if tokens <= most:
                return model
        return self._rest

    def __call__(self, *inputs, **named):
        if named:
            inputs = bind(self.names, inputs, named)
        return self.model_for(inputs)(*inputs)

    def static_inputs(self, batch: int | None = None, **sizes: int) -> tuple:
        """The input tensors of one size's graph, from its size class (``GraphPerSize.static_inputs``)."""
        tokens = math.prod({**sizes, **({"batch": batch} if batch is not None else {})}.values())
        model = next((m for most, m in self._classes if tokens <= most), self._rest)
        return model.static_inputs(batch, **sizes)

    def sizes(self) -> list:
        """The sizes that hold a CUDA graph now, in every class (graph mode: ``GraphPerSize.sizes``)."""
        return sorted(size for model in (*(m for _, m in self._classes), self._rest) for size in model.sizes())

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates, live, shared by every class."""
        return self._rest.state()

    def reset_state(self) -> None:
        self._rest.reset_state()

    def __getattr__(self, name: str):  # what the models of one package share (weights, variant, ...)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._rest, name)

    def __repr__(self):
        bounds = ", ".join(f"up to {most} tokens" for most, _ in self._classes)
        return f"<{self._rest!r} with its own program for calls of {bounds}>"
