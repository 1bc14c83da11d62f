"""The traced program as plain data: what inductor decided, owned by aotcombo.

Nothing here refers to a live inductor object. The trace stage fills these in,
the plan and codegen stages read them; every class is a frozen dataclass of
builtins, so a graph can be pickled, hashed, diffed and printed.

A program is a straight-line list of ``Op``s over named values. A value is a
tensor (graph input, allocation, view) or the tuple an extern call returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..runtime.manifest import Dynamic

# The attention extern call: public; the program calls it through runtime/ops.py.
ATTENTION = "aten::scaled_dot_product_attention"
# torch's functional collectives (a tensor-parallel build): their process group is the program's argument.
COLLECTIVES = "_c10d_functional"


@dataclass(frozen=True)
class TensorSpec:
    """Shape and strides are ints; with a dynamic batch (``--dynamic``) a graph input's
    batch dim is ``BATCH``, and an allocation's or view's size or stride that
    depends on it is a ``Ref`` to the ``Scalar`` computing it."""

    shape: tuple
    stride: tuple
    dtype: str  # torch dtype name without the prefix: "float32", "bfloat16", ...
    storage_offset: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class Ref:
    """A reference to a named value inside an op's arguments."""

    name: str


@dataclass(frozen=True)
class Input:
    """A graph input: a model weight (``kind='weight'``, ``key`` its state-dict
    name) or a user input (``kind='user'``, ``key`` its flat position)."""

    name: str
    spec: TensorSpec
    kind: str
    key: str | int


@dataclass(frozen=True)
class Kernel:
    """One fused scheduler node, as the Triton kernel inductor wrote for it."""

    name: str
    source: str  # the ``@triton.jit`` function, decorator included
    heuristic: str  # pointwise | reduction | persistent_reduction | ... | matmul (ours)
    signature: tuple[tuple[str, str], ...]  # (param, triton type) incl. constexprs
    constants: tuple[tuple[str, Any], ...]
    divisible_by_16: tuple[str, ...]  # params inductor specialised as 16-aligned
    numels: tuple[tuple[str, int], ...]  # ("x", 4096), ("r0_", 768), ...
    reduction_hint: str | None
    mutated: tuple[str, ...]  # params written in place (in_out_ptr*), or written by a kernel of ours
    no_x_dim: bool = False
    # Numels given at run time (a dynamic batch): their value in ``numels`` is the upper
    # bound of the range, which the block rules size for.
    dynamic_numels: tuple[str, ...] = ()
    # A mixed-order reduction (Inductor's RSPLIT_SIZE): each program reduces this many rows
    # and leaves partial results in a workspace sized for exactly this split.
    rsplit_size: int | None = None
    # A kernel of ours (``kernels/``): the family that wrote it ("fused_linear",
    # "decode_attention"); None: Inductor's. Its sizes are fixed in its source; its tile sizes
    # (block params), grid, warps and pipeline stages are fixed with it.
    family: str | None = None
    tiles: tuple[tuple[str, int], ...] = ()
    grid: tuple[int, int, int] | None = None
    num_warps: int | None = None
    num_stages: int | None = None

    @property
    def numel(self) -> dict[str, int]:
        return dict(self.numels)

    @property
    def is_reduction(self) -> bool:
        return any(k.startswith("r") for k, _ in self.numels)

    @property
    def block_params(self) -> list[str]:
        """Constexpr params the launch config sets (not given by the call)."""
        named = {p for p, _ in self.constants}
        return [p for p, t in self.signature if t == "constexpr" and p not in named and not p.endswith("numel")]

    def bind(self, args: tuple) -> list[tuple[str, str, Any]]:
        """``(param, type, value)`` for a launch's arguments, which fill the
        signature from the start (constants included, block sizes not)."""
        if len(args) > len(self.signature):
            raise ValueError(f"kernel {self.name}: {len(args)} arguments for {len(self.signature)} parameters")
        return [(p, t, a) for (p, t), a in zip(self.signature, args)]


# --- ops: one step of the program each ----------------------------------------


@dataclass(frozen=True)
class Alloc:
    out: str
    spec: TensorSpec


@dataclass(frozen=True)
class View:
    """``out = base.as_strided(spec)``: reinterpretation of existing storage."""

    out: str
    base: str
    spec: TensorSpec


@dataclass(frozen=True)
class Extern:
    """A call of a public torch op: ``out = torch.ops.<op>(*args, **kwargs)``.

    ``args``/``kwargs`` hold builtins, ``Ref``s, lists/tuples of both, and
    ``Const`` markers for dtypes/devices/layouts. ``writes`` names the values
    whose storage the op mutates (``out=`` arguments, in-place ops)."""


    op: str  # "aten::mm.out"
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    out: str | None
    writes: tuple[str, ...]
    aliases: tuple[str, ...] = ()  # inputs whose storage ``out`` shares


@dataclass(frozen=True)
class Const:
    """A torch constant that is not a builtin: ``torch.bfloat16``, a device..."""

    kind: str  # dtype | device | layout | memory_format
    value: str


@dataclass(frozen=True)
class GetItem:
    out: str
    base: str
    index: int


@dataclass(frozen=True)
class Scalar:
    """An integer computed at run time from the input sizes (a dynamic batch):
    ``out = size(args[0], args[1])`` (``fn == "size"``), else ``out = fn(*args)`` with ``fn``
    one of add, sub, mul, floordiv, mod, neg, max, min, sum; args are ``Ref``s to tensors or
    scalars, and ints."""

    out: str
    fn: str
    args: tuple


@dataclass(frozen=True)
class Launch:
    """A launch of one traced kernel with its call arguments (values or ints)."""

    kernel: str
    args: tuple  # Ref | int | float, aligned with the kernel's runtime params


Op = Alloc | View | Extern | GetItem | Scalar | Launch


@dataclass(frozen=True)
class Graph:
    """Everything the plan stage needs about one model for one arch."""

    arch: int
    inputs: tuple[Input, ...]
    ops: tuple[Op, ...]
    kernels: tuple[Kernel, ...]
    outputs: tuple[str | None, ...]  # flat outputs, by value name
    specs: tuple[tuple[str, TensorSpec], ...] = field(default=())  # every tensor value
    # (input name, output index): the model updates that input in place; the
    # output holds its new value and the program copies it back.
    mutations: tuple[tuple[str, int], ...] = ()
    # Buffers (weight keys) the program updates in place: the package's state, which each
    # loaded model holds its own copy of.
    state: tuple[str, ...] = ()
    # A dynamic batch (its range and batched user inputs); None: static shapes.
    dynamic: Dynamic | None = None

    @property
    def user_outputs(self) -> tuple[str | None, ...]:
        mutated = {i for _, i in self.mutations}
        return tuple(o for i, o in enumerate(self.outputs) if i not in mutated)

    def kernel(self, name: str) -> Kernel:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)

    @property
    def spec(self) -> dict[str, TensorSpec]:
        return dict(self.specs)


def is_collective(op) -> bool:
    """A call of one of torch's functional collectives (all-reduce, all-gather, their wait)."""
    return isinstance(op, Extern) and op.op.startswith(f"{COLLECTIVES}::")


def kernel_only_inputs(graph: Graph) -> frozenset[str]:
    """User inputs whose storage only the graph's kernels touch: no torch op takes it or a
    view of it, no output is it or a view of it, and the model does not update it."""
    owner = {i.name: i.name for i in graph.inputs if i.kind == "user"}
    touched = {name for name, _ in graph.mutations}
    for op in graph.ops:
        if isinstance(op, View) and op.base in owner:
            owner[op.out] = owner[op.base]
        elif isinstance(op, Extern):
            touched.update(owner[n] for n in refs_in((op.args, op.kwargs)) if n in owner)
    touched.update(owner[n] for n in graph.outputs if n in owner)
    return frozenset(name for name in owner.values() if name not in touched)


def without_unread_weights(graph: Graph) -> Graph:
    """``graph`` without the weight inputs nothing reads (no op, output or state): parameters
    of the model that its forward never uses, such as a VAE's encoder when only ``decode`` is
    traced; the package would carry them for nothing."""
    read = set(graph.outputs) | {name for name, _ in graph.mutations}
    for op in graph.ops:
        if isinstance(op, (View, GetItem)):
            read.add(op.base)
        elif isinstance(op, Extern):
            read.update(refs_in((op.args, op.kwargs)))
        elif isinstance(op, (Launch, Scalar)):
            read.update(refs_in(op.args))
    kept = tuple(i for i in graph.inputs if i.kind != "weight" or i.name in read or i.key in graph.state)
    return graph if len(kept) == len(graph.inputs) else replace(graph, inputs=kept)


def refs_in(value: Any) -> list[str]:
    """Names of every ``Ref`` inside a (nested) argument value."""
    if isinstance(value, Ref):
        return [value.name]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in refs_in(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in refs_in(v)]
    return []


def replace(obj, **changes):
    return dataclasses.replace(obj, **changes)
