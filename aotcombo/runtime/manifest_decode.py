"""``manifest.json``'s values into the manifest's dataclasses, each checked against its
field's annotation (``manifest.Manifest.from_json``): stdlib only, shipped in every wheel."""

from __future__ import annotations

import dataclasses
import types
import typing


class ManifestError(ValueError):
    """A manifest this runtime cannot read."""


def decode(kind, value, where: str, modes: dict):
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise ManifestError(f"{where}: expected an object, got {type(value).__name__}")
        hints = _hints(kind)
        fields = {f.name: f for f in dataclasses.fields(kind)}
        unknown = set(value) - set(fields)
        if unknown:
            raise ManifestError(f"{where}: unknown field {min(unknown)!r}")
        try:
            return kind(**{k: decode(hints[k], v, f"{where}.{k}", modes) for k, v in value.items() if fields[k].init})
        except TypeError as e:  # a required field is missing
            raise ManifestError(f"{where}: {e}") from None
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if any(dataclasses.is_dataclass(a) and "mode" in _hints(a) for a in args):  # a shape mode
            mode = value.get("mode") if isinstance(value, dict) else None
            if mode not in modes:
                raise ManifestError(f"{where}: unknown mode {mode!r}")
            return decode(modes[mode], value, where, modes)
        for a in args:
            if a is not type(None) and _is(a, value):
                return value
        raise ManifestError(f"{where}: unexpected {type(value).__name__} {value!r}")
    if origin is tuple:
        if not isinstance(value, list):
            raise ManifestError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v, f"{where}[{i}]", modes) for i, v in enumerate(value))
        if len(args) != len(value):
            raise ManifestError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(decode(a, v, f"{where}[{i}]", modes) for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ManifestError(f"{where}: expected an object, got {type(value).__name__}")
        return {k: decode(args[1], v, f"{where}.{k}", modes) for k, v in value.items()}
    if not _is(kind, value):
        raise ManifestError(f"{where}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _is(kind, value) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, kind)


_HINTS: dict = {}


def _hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


