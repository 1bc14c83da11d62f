"""Example inputs given by name, as a tokenizer gives them: ``{"input_ids": ..., "attention_mask": ...}``.

``by_name(model, example)`` makes them positional inputs in the dict's order and the model one
that takes them so: its class becomes a subclass whose ``forward(input_ids, attention_mask)``
passes them on to the model's own ``forward`` by keyword. It is the same object, its parameters
and buffers under the same names (``--weights external`` and ``load(weights=...)`` take the
model's own ``state_dict()``). The package's inputs are named after the keys and take them as
keywords too. An entry whose value is None is left out where ``forward``'s parameter defaults
to None (the same call); ``by_position`` names a tuple's inputs after forward's parameters where
some are None (``bind`` picks). ``tensors_of`` and ``positional`` take the same tensors from
``get_example_inputs(batch=N)`` and ``make_inputs(batch)``.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch

from ...errors import UsageError

_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def values(example: dict, origin: str, error: type = UsageError) -> tuple[torch.Tensor, ...]:
    """The tensors of ``example`` in its order, its None entries left out (``origin``: where it
    came from, and ``error`` the class of the errors, for them)."""
    for key, value in example.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise error(f"{origin} has the key {key!r}: example inputs given by name are keyed by forward's "
                        "parameter names", fix="key each example input by the name of forward's parameter")
        if value is not None and not isinstance(value, torch.Tensor):
            raise error(f"{origin}[{key!r}] is a {type(value).__name__}, not a tensor: a package's forward "
                        "takes tensors", fix="give tensors only (make other values constants or attributes of "
                        "the model)")
    tensors = tuple(v for v in example.values() if v is not None)
    if not tensors:
        raise error(f"{origin} holds no tensor", fix="give at least one example input tensor")
    return tensors


def by_name(model: torch.nn.Module, example: dict, origin: str,
            error: type = UsageError) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """``model`` taking ``example``'s tensors by position (see the module), and those tensors."""
    tensors = values(example, origin, error)
    names = tuple(k for k, v in example.items() if v is not None)
    cls = type(model)
    try:
        parameters = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError, AttributeError):  # TorchScript's forward
        raise error(f"{origin} gives the inputs by name, and {cls.__name__}.forward's parameters cannot be read",
                    fix="give the example inputs as a tuple, in forward's order") from None
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    shown = f"forward({', '.join(n for n in parameters if n != 'self')})"
    for key, value in example.items():
        p = parameters.get(key)
        if p is None and not takes_any:
            raise error(f"{origin} names the input {key!r}, which {cls.__name__}.{shown} does not take",
                        fix="key each example input by the name of one of forward's parameters")
        if p is not None and p.kind not in _BY_KEYWORD:
            raise error(f"{origin} names the input {key!r}, which {cls.__name__}.forward takes only by position",
                        fix="give the example inputs as a tuple, in forward's order")
        if value is None and (p is None or p.default is not None):
            raise error(f"{origin}[{key!r}] is None, which is not {cls.__name__}.forward's default for it",
                        fix=f"leave {key!r} out, or give a tensor")
    try:
        if "forward" in vars(model):  # an instance's own forward would hide the class's
            raise TypeError("the model has a forward of its own")
        model.__class__ = _taking(cls, names)
    except TypeError as exc:  # a class whose instances cannot change class (slots, TorchScript)
        raise error(f"{origin} gives the inputs by name, and the {cls.__name__} model cannot take them so ({exc})",
                    fix="give the example inputs as a tuple, in forward's order") from None
    return model, tensors


def by_position(model: torch.nn.Module, example: tuple | list, origin: str,
                error: type = UsageError) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """``by_name`` for positional example inputs some of which are None (``(input_ids, None, mask)``):
    each named after forward's parameter at its position, the None ones left out where that is
    their default."""
    try:
        parameters = [p for p in inspect.signature(type(model).forward).parameters.values() if p.name != "self"]
    except (TypeError, ValueError, AttributeError):  # TorchScript's forward
        parameters = []
    named = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
    if len(named) < len(example):
        raise error(f"{origin} has None among {len(example)} inputs, and forward takes {len(named)} by name",
                    fix="give a dict of tensors keyed by forward's parameter names")
    return by_name(model, dict(zip(named, example)), origin, error)


def bind(model: torch.nn.Module, example, origin: str, error: type = UsageError):
    """``(model, example)`` as the build takes them: a dict by name (``by_name``), a tuple holding
    None by position (``by_position``), anything else as it is."""
    if isinstance(example, dict):
        return by_name(model, example, origin, error)
    if isinstance(example, (tuple, list)) and any(t is None for t in example):
        return by_position(model, example, origin, error)
    return model, example


def tensors_of(example, origin: str, error: type = UsageError):
    """The tensors of the example inputs at another size, as ``bind`` took the first ones: a
    dict's (``values``), a tuple's but the None ones; anything else as it is."""
    if isinstance(example, dict):
        return values(example, origin, error)
    if isinstance(example, (tuple, list)):
        return tuple(t for t in example if t is not None)
    return example


def positional(make: Callable | None) -> Callable | None:
    """``make(batch)`` (the example inputs at a batch size) giving its tensors as ``tensors_of`` does."""
    return None if make is None else lambda batch: tensors_of(make(batch), f"make_inputs({batch})")


def _taking(cls: type, names: tuple[str, ...]) -> type:
    """A subclass of ``cls`` whose forward takes ``names`` by position (or keyword) and passes them
    on by keyword: a function of those parameters (torch.export binds its inputs to its signature)."""
    source = (f"def forward(self, {', '.join(names)}):\n"
              f"    return __own(self, {', '.join(f'{n}={n}' for n in names)})\n")
    namespace = {"__own": cls.forward}
    exec(compile(source, f"<aotcombo: {cls.__name__}.forward by name>", "exec"), namespace)  # noqa: S102
    return type(cls.__name__, (cls,), {"forward": namespace["forward"], "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})
