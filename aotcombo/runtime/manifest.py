"""The contract between the build and the runtime: ``manifest.json``, as dataclasses.

The build writes a ``Manifest`` (``aotcombo/builder/manifest.py`` assembles it), the
runtime and ``aotcombo inspect`` read it, both through this module only: it ships in
every wheel, stdlib only. ``Manifest.to_json()`` / ``Manifest.from_json()`` are the only
ways in and out; a manifest of another format, or one that does not fit these classes,
is a ``ManifestError`` naming what is wrong.

A package holds one ``Specialization`` per input shape it was built for: one for static
shapes, one per bucket for ``--batch`` or ``--buckets`` (each with the axes of ``--dynamic``
symbolic, where both are given), and for dynamic axes one per size class (calls of a few
tokens, then every other call). Each holds an ``ArchVariant``
per cubin arch (``"sm_90"``) and one for the PTX (``"ptx"``): the program module to run,
its kernels with their fixed launch configs, and the order of launches.

Shape modes (``shapes``): ``Static()``, ``Buckets(sizes, pad)`` or ``Dynamic(axes)``;
``batched_inputs`` and ``batched_outputs`` say which flat inputs and outputs carry the
batch as dim 0. A dynamic package has named axes (``batch``, ``seq``...), each a range of
sizes and the input dims that carry it; in an input's shape such a dim is the axis's name,
and a size or stride that depends on axes the text of an expression in them (``"768*seq"``).

A field with a default may be absent from the JSON: ``aotcombo inspect`` reads format-2
manifests written by earlier versions, before such a field existed (a package's own runtime
only ever reads the manifest its own build wrote). Every other field is required.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from .manifest_decode import ManifestError, decode

FORMAT = 2
BATCH = "batch"  # the axis --batch and dim 0 stand for
PLACED = "aotcombo_out"  # the program's parameter: tensors for the outputs it would allocate itself
MAX_GRAPHS = 64  # load()'s default, dynamic axes: sizes holding a CUDA graph at once (per_size.py)
CAPTURE_AFTER = 8  # load()'s default, dynamic axes: the call of a size that captures its graph
GROUP = "aotcombo_group"  # the program's parameter: its collectives' process group (tensor parallel)


# --- shape modes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Static:
    """Exactly the example inputs' shapes."""

    batched_inputs: tuple[int, ...] = ()
    batched_outputs: tuple[int, ...] = ()
    mode: str = field(default="static", init=False)


@dataclass(frozen=True)
class Buckets:
    """One specialization per size of one axis (the batch, dim 0 of ``batched_inputs``, or a
    named axis of the model's, at ``dims``); ``pad``: sizes between them run in the next one,
    padded with zeros along the axis, the outputs at ``out_dims`` cut back. ``dynamic``: other
    axes, symbolic in every bucket (``Buckets((128, 256), axis="seq", dynamic=Dynamic(batch=(1, 32)))``)."""

    sizes: tuple[int, ...]
    pad: bool = False
    batched_inputs: tuple[int, ...] = ()
    batched_outputs: tuple[int, ...] = ()
    mode: str = field(default="buckets", init=False)
    axis: str = BATCH
    dims: tuple[tuple[int, int], ...] = ()  # (flat input, dim) carrying the axis; () : dim 0 of batched_inputs
    out_dims: tuple[tuple[int, int], ...] = ()  # (flat output, dim); () : dim 0 of batched_outputs
    dynamic: Dynamic | None = None

    @property
    def input_dims(self) -> tuple[tuple[int, int], ...]:
        return self.dims or tuple((i, 0) for i in self.batched_inputs)

    @property
    def output_dims(self) -> tuple[tuple[int, int], ...]:
        return self.out_dims or tuple((i, 0) for i in self.batched_outputs)


@dataclass(frozen=True)
class Axis:
    """A named axis whose size each call chooses, in ``[min, max]``; ``dims``: the (flat
    input, dim) pairs that carry it."""

    name: str
    min: int
    max: int
    dims: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, init=False)
class Dynamic:
    """One build whose named axes are run-time sizes, each in its range.

    ``Dynamic(batch=(1, 32), seq=(1, 512))``; ``Dynamic(1, 256)`` is ``Dynamic(batch=(1, 256))``
    (the batch, dim 0 of the inputs that carry it); ``Dynamic(axes=(Axis(...), ...))`` as read
    back from a manifest."""

    axes: tuple[Axis, ...]
    mode: str = field(default="dynamic", init=False)

    def __init__(self, min: int | None = None, max: int | None = None, batched_inputs: tuple[int, ...] = (), *,
                 axes: tuple[Axis, ...] = (), **ranges: tuple[int, int]):
        if min is not None or max is not None:
            ranges = {BATCH: (min, max), **ranges}
        made = tuple(axes) + tuple(Axis(name, int(low), int(high)) for name, (low, high) in ranges.items())
        if batched_inputs:
            made = tuple(dataclasses.replace(a, dims=tuple((i, 0) for i in batched_inputs)) if a.name == BATCH
                         else a for a in made)
        object.__setattr__(self, "axes", made)

    @property
    def ranges(self) -> dict[str, tuple[int, int]]:
        """Axis name -> (min, max)."""
        return {a.name: (a.min, a.max) for a in self.axes}

    @property
    def batched_inputs(self) -> tuple[int, ...]:
        """The flat inputs that carry a dynamic axis."""
        return tuple(sorted({i for a in self.axes for i, _ in a.dims}))

    @property
    def batched_outputs(self) -> tuple[int, ...]:
        return ()


ShapeMode = Static | Buckets | Dynamic


def dynamic_axes(shapes: ShapeMode) -> Dynamic | None:
    """The symbolic axes of a shape mode: all of them, or those dynamic in every bucket."""
    return shapes if isinstance(shapes, Dynamic) else getattr(shapes, "dynamic", None)
SHAPE_MODES = {"static": Static, "buckets": Buckets, "dynamic": Dynamic}


# --- one input shape ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """A user input: ``shape`` holds ints, and a dynamic axis's name where it carries one."""

    name: str
    dtype: str  # torch dtype name: "float32", "bfloat16", ...
    shape: tuple[int | str, ...]
    stride: tuple[int | str, ...]
    align: int = 16  # bytes the data pointer must be a multiple of
    mutated: bool = False  # the model updates it in place
    # Only the package's kernels touch it (no torch op, no output is it or a view of it):
    # graph mode can point those kernels at the caller's tensor instead of copying it in.
    direct: bool = False


@dataclass(frozen=True)
class SubKernel:
    """One Inductor kernel inside a combo kernel (what ``inspect`` shows)."""

    kernel: str
    heuristic: str
    numel: dict[str, int]
    block: dict[str, int]
    programs: int
    axes: tuple[int, int, int]
    num_warps: int


@dataclass(frozen=True)
class ComboKernel:
    """A combo kernel as the package lists it (every compiled kernel is one, of one or more
    sub-kernels): its image, symbol, fixed launch config and parameter kinds. Loaded, it is a
    ``cuda.LoadedKernel``."""

    name: str
    function: str
    image: str  # path inside the package
    sha256: str  # of the image's bytes
    grid: tuple[int, int, int]  # with a dynamic grid: the largest
    dynamic_grid: bool
    num_warps: int
    shared: int
    params: tuple[str, ...]  # "ptr", "i32", "fp32", ...
    global_scratch: tuple[int, int]  # (bytes per program, alignment)
    profile_scratch: tuple[int, int]
    dispatch: str
    level: int
    subs: tuple[SubKernel, ...]
    registers: int | None = None
    local_bytes: int | None = None
    stack_bytes: int | None = None
    pdl: bool = False  # launched with programmatic stream serialization: it waits for the kernel before it


@dataclass(frozen=True)
class Step:
    """One launch of the forward, in order: a combo kernel or an extern call."""

    kind: str  # "combo" | "extern"
    name: str  # the combo's name, or the op: "aten::mm.default"
    level: int


@dataclass(frozen=True)
class Stats:
    """Per call: Inductor's kernels (and ours), the combo launches they make, the extern calls.
    At load (``prepare``: the work on the weights alone): its launches, and the bytes of the
    results forward reads, which stay on the GPU."""

    kernels: int
    combos: int
    extern_calls: int
    load_launches: int = 0
    load_bytes: int = 0
    # the bytes of the buffers a call holds at its peak (dynamic axes at their largest): what a
    # captured graph's memory pool keeps (0: not known, a package built before it was recorded)
    peak_bytes: int = 0

    @property
    def launches_per_forward(self) -> int:
        return self.combos + self.extern_calls

    @property
    def launches_uncombined(self) -> int:
        return self.kernels + self.extern_calls


@dataclass(frozen=True)
class ArchVariant:
    """What runs on one arch: a program module, its kernels (``kernels[i]`` in the
    program), and its launches in order."""

    program: str
    kernels: tuple[ComboKernel, ...]
    schedule: tuple[Step, ...]
    stats: Stats
    # The program's ``prepare`` (the work on the weights alone) and its kernels, hashed: buckets
    # whose prepare is the same share its results. None: no prepare.
    prepare_key: str | None = None


@dataclass(frozen=True)
class Specialization:
    """One input shape: its inputs and its variants by key (``"sm_90"``, ``"ptx"``)."""

    batch: int | None  # the bucket's size; None without buckets
    inputs: tuple[Input, ...]
    variants: dict[str, ArchVariant]
    # Dynamic axes: the calls whose axes' sizes multiply to at most this many tokens run this
    # specialization (a size class: linears of few rows in kernels of ours); None: every call
    # the others do not take (the last specialization).
    max_tokens: int | None = None


@dataclass(frozen=True)
class Weight:
    """One of the model's tensors the program reads (a parameter or buffer; ``Weights.tensors``
    lists them): the model's name for it (``layers.0.attn.q_proj.weight``), dtype and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    external: bool = False  # not in the package: load(weights=...) gives it
    # The model's tensors it is made of, concatenated along dim 0 (linears of one input
    # combined into one matmul), and their rows: load(weights=...) gives those, not it.
    parts: tuple[str, ...] = ()
    part_rows: tuple[int, ...] = ()
    same_as: str | None = None  # an earlier name of the same tensor (tied weights): stored and loaded once
    # Tensor parallel (``Manifest.world_size`` > 1): the dim along which each rank holds its
    # 1/world_size slice (``shape`` is one rank's); the package and ``load(weights=...)``
    # hold the whole tensor. None: every rank holds all of it.
    shard_dim: int | None = None


ITEMSIZE = {  # bytes per element of each dtype a manifest may name
    "complex128": 16, "float64": 8, "int64": 8, "uint64": 8, "complex64": 8, "float32": 4, "int32": 4, "uint32": 4,
    "bfloat16": 2, "float16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1}


@dataclass(frozen=True)
class Weights:
    file: str | None  # torch.save of the packaged (not external) tensors, a list in program order
    tensors: tuple[Weight, ...]  # by the model's names (its state_dict's), in program order
    file_bytes: int
    sha256: str  # of the file's bytes
    # The buffers forward updates in place (a KV cache): each load() holds its own copies.
    state: tuple[str, ...] = ()

    @property
    def external(self) -> tuple[str, ...]:
        """The tensors ``load(weights=...)`` must give (``build --weights external``)."""
        return tuple(t.name for t in self.tensors if t.external)

    @property
    def bytes(self) -> int:
        """The tensors' data, a tied tensor once."""
        total = 0
        for t in self.tensors:
            if t.same_as is not None:
                continue
            n = ITEMSIZE.get(t.dtype, 1)
            for d in t.shape:
                n *= d
            total += n
        return total


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    built_with: dict[str, str]  # tool versions: aotcombo, torch, triton
    torch: tuple[str, str]  # the torch releases the package runs on, first and last: ("2.11", "2.14")
    archs: tuple[int, ...]  # cubin archs
    ptx_arch: int
    shapes: ShapeMode
    specializations: tuple[Specialization, ...]  # by batch size, ascending (size classes: the one for all sizes last)
    weights: Weights
    extern_ops: tuple[str, ...]  # the torch ops the programs call ("aten::mm.out", ...)
    format: int = FORMAT
    # Tensor-parallel ranks (``build --tensor-parallel N``): one program every rank runs on its
    # slices of the weights (``Weight.shard_dim``), its collectives over torch.distributed.
    world_size: int = 1

    @property
    def private_ops(self) -> tuple[str, ...]:
        """The extern ops outside torch's public API (``aten::_...``): their contracts can move
        between releases, which ``torch`` bounds."""
        return tuple(op for op in self.extern_ops if op.partition("::")[2].startswith("_"))

    def specialization(self, batch: int | None = None, max_tokens: int | None = None) -> Specialization:
        """The specialization of bucket ``batch``, or of the size class of at most ``max_tokens``;
        without either, the last (the only one, or the one for every size)."""
        if batch is None and max_tokens is None:
            return self.specializations[-1]
        for s in self.specializations:
            if s.batch == batch and s.max_tokens == max_tokens:
                return s
        raise KeyError(batch if max_tokens is None else max_tokens)

    @property
    def size_classes(self) -> tuple[int, ...]:
        """The token bounds of the dynamic axes' size classes, ascending (none: one program)."""
        return tuple(sorted(s.max_tokens for s in self.specializations if s.max_tokens is not None))

    @property
    def inputs(self) -> tuple[Input, ...]:
        """The inputs of the largest specialization."""
        return self.specializations[-1].inputs

    def to_json(self) -> str:
        """Compact (``aotcombo inspect`` is for reading it): a dynamic BERT-base's compresses to 6.4
        kB, 7.9 with one space of indent a level."""
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Manifest:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ManifestError(f"manifest.json is not JSON: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            found = data.get("format") if isinstance(data, dict) else None
            raise ManifestError(f"manifest format {found!r}; this runtime reads format {FORMAT}")
        shapes = data.get("shapes")
        if isinstance(shapes, dict) and shapes.get("mode") == "dynamic" and "min" in shapes:
            # written before named axes: a dynamic batch, dim 0 of its batched inputs
            data["shapes"] = {"mode": "dynamic", "axes": [{
                "name": BATCH, "min": shapes["min"], "max": shapes["max"],
                "dims": [[i, 0] for i in shapes.get("batched_inputs", [])]}]}
        return decode(cls, data, "manifest", SHAPE_MODES)
