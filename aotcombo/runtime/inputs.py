"""A package's inputs: their specs, the per-call input check, static buffers.

An ``InputSpec`` is a manifest ``Input`` with its dtype as a ``torch.dtype``. In a package
with dynamic axes a dim of a shape may be an axis's name (``"batch"``, ``"seq"``): every
dim of one axis must hold the same size, inside the axis's built range, and strides may be
expressions in the axes (``"768*seq"``). ``check_inputs`` finds and names the first
mismatch; ``make_input_check`` returns the per-call input check: one comparison of a list
of per-input tuples with the expected one (with dynamic axes, made once per distinct
sizes), falling back to ``check_inputs`` for the message. (A *guard*, in this runtime, is
something else: what says whether a captured graph may replay on a call's inputs; bound.py.)
"""

from __future__ import annotations

import re
from typing import NamedTuple

import torch

from .manifest import Input


class InputSpec(NamedTuple):
    name: str
    dtype: torch.dtype
    shape: tuple  # ints, and axis names where a dynamic axis runs
    stride: tuple  # ints, and expressions in the axes
    align: int  # bytes the data pointer must be a multiple of
    mutated: bool  # the model updates it in place
    direct: bool = False  # only the package's kernels read it: graph mode points them at the caller's tensor

    @classmethod
    def of(cls, i: Input) -> InputSpec:
        return cls(i.name, getattr(torch, i.dtype), tuple(i.shape), tuple(i.stride), i.align, i.mutated, i.direct)

    @property
    def dynamic(self) -> bool:
        """Whether a dim of it is a dynamic axis."""
        return any(isinstance(d, str) for d in self.shape)

    def shape_at(self, sizes: dict | None) -> tuple[int, ...]:
        return at_sizes(self.shape, sizes)

    def stride_at(self, sizes: dict | None) -> tuple[int, ...]:
        return at_sizes(self.stride, sizes)

    def shown(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"({dims}{',' if len(self.shape) == 1 else ''})"


_EXPRESSION = re.compile(r"[0-9A-Za-z_+*() ]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def at_sizes(dims: tuple, sizes: dict | None) -> tuple[int, ...]:
    """Sizes or strides at the given axis sizes (``{"batch": 4, "seq": 77}``): an axis's name
    is its size, a text such as ``"768*seq"`` an expression of them."""
    if all(isinstance(d, int) for d in dims):
        return dims
    if sizes is None:
        raise ValueError(f"{dims} depend on dynamic axes, and no sizes were given")
    return tuple(d if isinstance(d, int) else sizes[d] if d in sizes else _evaluate(d, sizes) for d in dims)


def _evaluate(text: str, sizes: dict) -> int:
    if not _EXPRESSION.fullmatch(text) or not set(_NAME.findall(text)) <= set(sizes):
        raise ValueError(f"cannot evaluate the size {text!r}: the package is damaged or was not built by this aotcombo")
    return int(eval(text, {"__builtins__": {}}, dict(sizes)))  # digits, + * ( ) and the axes only


def axis_dims(specs: list[InputSpec]) -> dict[str, tuple[int, int]]:
    """Each dynamic axis -> the first (input, dim) that carries it."""
    found: dict[str, tuple[int, int]] = {}
    for i, spec in enumerate(specs):
        for d, e in enumerate(spec.shape):
            if isinstance(e, str):
                found.setdefault(e, (i, d))
    return found


def sizes_of(specs: list[InputSpec], inputs: tuple) -> dict[str, int] | None:
    """The size of each dynamic axis in checked ``inputs`` (None: the package has none)."""
    dims = axis_dims(specs)
    return {axis: inputs[i].shape[d] for axis, (i, d) in dims.items()} if dims else None


def check_inputs(specs: list[InputSpec], inputs: tuple, device: torch.device | None = None,
                 ranges: dict[str, tuple[int, int]] | None = None, exact_layout: bool = True) -> bool:
    """Raise TypeError (type, dtype) or ValueError (the rest) unless the inputs match the specs.

    ``device=None`` skips the device check; ``ranges``: each dynamic axis's (min, max).
    ``exact_layout=False`` accepts any strides and alignment (a loaded model copies such inputs
    into the layout it was built for). Returns whether every input has the spec's strides and
    alignment.
    """
    exact, seen = True, {}  # axis -> (input, size) of the first input carrying it
    if len(inputs) != len(specs):
        raise ValueError(f"expected {len(specs)} inputs ({', '.join(s.name for s in specs)}), got {len(inputs)}")
    for i, (spec, t) in enumerate(zip(specs, inputs)):
        what = f"input {i} ({spec.name!r})"
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
        if device is not None and t.device != device:
            raise ValueError(f"{what}: expected device {device}, got {t.device}")
        if t.dtype != spec.dtype:
            raise TypeError(f"{what}: expected dtype {spec.dtype}, got {t.dtype}")
        if len(t.shape) != len(spec.shape) or any(isinstance(e, int) and e != d for e, d in zip(spec.shape, t.shape)):
            raise ValueError(f"{what}: expected shape {spec.shown()}, got {tuple(t.shape)}")
        for axis, size in ((e, d) for e, d in zip(spec.shape, t.shape) if isinstance(e, str)):
            _check_axis(what, axis, size, (ranges or {}).get(axis), seen.get(axis), specs)
            seen.setdefault(axis, (i, size))
        stride = spec.stride_at({axis: size for axis, (_, size) in seen.items()} if spec.dynamic else None)
        if not same_layout(t.shape, t.stride(), stride):
            if exact_layout:
                raise ValueError(f"{what}: expected stride {stride}, got {t.stride()}")
            exact = False
        if t.data_ptr() % spec.align:
            if exact_layout:
                raise ValueError(f"{what}: expected data_ptr aligned to {spec.align} bytes, got one "
                                 f"{t.data_ptr() % spec.align} bytes past (storage offset {t.storage_offset()})")
            exact = False
    return exact


def _check_axis(what: str, axis: str, size: int, bounds, first, specs) -> None:
    """One dim of dynamic axis ``axis``: inside its range, and equal to its first input's."""
    low, high = bounds or (0, size)
    if not low <= size <= high:
        raise ValueError(f"{what}: {axis} size {size} is outside the range {low}..{high} the package was "
                         f"built for: rebuild with --dynamic {axis}={min(low, size)}:{max(high, size)}")
    if first is not None and size != first[1]:
        other = f"input {first[0]} ({specs[first[0]].name!r})"
        raise ValueError(f"{what}: {axis} size {size}, but {other} has {first[1]}: inputs sharing the "
                         f"{axis} axis must agree")


def same_layout(shape, got: tuple, expected: tuple) -> bool:
    """Whether strides ``got`` address a tensor of ``shape`` as ``expected`` do: a dim of size
    1 is only ever indexed at 0, so its stride does not matter (``t[:, -1:]`` of a [b, n]
    tensor is laid out as a contiguous [b, 1] one)."""
    return got == expected or all(g == e for n, g, e in zip(shape, got, expected) if n != 1) or 0 in shape


def make_input_check(specs: list[InputSpec], device: torch.device, ranges: dict[str, tuple[int, int]] | None = None,
                     exact_layout: bool = True):
    """``input_check(inputs) -> exact``: check_inputs(specs, inputs, device, ranges, exact_layout),
    cheap when they match exactly."""
    if any(s.dynamic for s in specs):
        return _dynamic_input_check(specs, device, ranges, exact_layout)
    expected = [(s.dtype, s.shape, s.stride, _index(device), 0) for s in specs]
    masks, n = [s.align - 1 for s in specs], len(specs)

    def input_check(inputs: tuple) -> bool:
        try:
            exact = len(inputs) == n and [(t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() & mask)
                                          for t, mask in zip(inputs, masks)] == expected
        except Exception:  # noqa: BLE001 (not a tensor, or a strideless one: check_inputs names it)
            exact = False
        return exact or check_inputs(specs, inputs, device, exact_layout=exact_layout)

    return input_check


def _dynamic_input_check(specs: list[InputSpec], device: torch.device, ranges, exact_layout: bool):
    """The input check of a package with dynamic axes: the expected (dtype, shape, strides,
    device, alignment) of every input at the axes' sizes in the first inputs carrying them,
    made once per distinct sizes seen."""
    dims = axis_dims(specs)
    axes = list(dims)
    where = [dims[a] for a in axes]
    bounds = [(ranges or {}).get(a, (1, 1 << 62)) for a in axes]
    masks, n = [s.align - 1 for s in specs], len(specs)
    expected: dict[tuple, list] = {}

    def expected_at(key: tuple) -> list:
        if key not in expected:
            if len(expected) >= 256:
                expected.clear()
            sizes = dict(zip(axes, key))
            expected[key] = [(s.dtype, s.shape_at(sizes), s.stride_at(sizes), _index(device), 0) for s in specs]
        return expected[key]

    def input_check(inputs: tuple) -> bool:
        try:
            key = tuple(inputs[i].shape[d] for i, d in where)
            exact = all(lo <= k <= hi for k, (lo, hi) in zip(key, bounds)) and len(inputs) == n and [
                (t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() & mask)
                for t, mask in zip(inputs, masks)] == expected_at(key)
        except Exception:  # noqa: BLE001 (check_inputs names it)
            exact = False
        return exact or check_inputs(specs, inputs, device, ranges, exact_layout)

    return input_check


_MISSING = object()


def _index(device: torch.device) -> int:
    """What ``Tensor.get_device()`` gives for a tensor on ``device`` (-1: the CPU)."""
    return -1 if device.type == "cpu" else device.index


def bind(names: list[str], args: tuple, named: dict) -> tuple:
    """The inputs in order from a call by position and keyword (``names``: forward's; those
    that are not identifiers, such as ``xs[0]`` of a ``*xs``, go by position only)."""
    if len(args) > len(names):
        raise TypeError(f"expected {len(names)} inputs ({', '.join(names)}), got {len(args)} by position")
    values = list(args) + [_MISSING] * (len(names) - len(args))
    for key, value in named.items():
        i = names.index(key) if key in names and key.isidentifier() else -1
        if i < 0:
            raise TypeError(f"unexpected input {key!r}: the model's inputs are {', '.join(names)}")
        if i < len(args):
            raise TypeError(f"input {key!r} given by position and by name")
        values[i] = value
    missing = [name for name, value in zip(names, values) if value is _MISSING]
    if missing:
        raise TypeError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    return tuple(values)


def allocate(specs: list[InputSpec], device: torch.device, sizes: dict | None = None) -> tuple:
    """Zeroed tensors matching the specs, the dynamic axes at ``sizes`` (fresh allocations
    are 512-byte aligned)."""
    return tuple(torch.empty_strided(s.shape_at(sizes), s.stride_at(sizes), dtype=s.dtype,
                                     device=device).zero_()
                 for s in specs)
