"""Assemble the package: its ``Manifest`` (the runtime's contract) and the files it names.

``assemble`` takes what the earlier stages built (per input shape and arch: the plan,
the program, the kernel sources and binaries) and lays it out: programs, cubins per arch
and the PTX of the lowest, each kernel image stored once by content (buckets whose
kernels compile to the same bytes share one file), every image's source in one file
(``SOURCES_FILE``: image path -> source; one file compresses ~2.6x better than a file each, as
the sources share their text), the weights, and the manifest that describes all of it
(``aotcombo.runtime.manifest``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from ...runtime import manifest as m
from ...runtime.checks import ARCH_SPECIFIC_FROM
from ...runtime.state import view_key
from ..codegen.combo import combo_signature
from .. import graph as g
from ..kernels.linear import combine as linears
from ..inputs.environment import RUNTIME_TORCH, tool_versions
from ..plan.combos import ComboLaunch, Plan
from ..plan.memory import peak_bytes

WEIGHTS_FILE = "weights.pt"
SOURCES_FILE = "kernels/sources.json"  # every kernel image's source, by the image's path


@dataclass
class VariantBuild:
    """Everything built for one input shape and one arch."""

    arch: int
    batch: int | None  # the bucket's batch size; None without buckets
    plan: Plan
    program: str  # the rendered program module
    sources: dict[str, str]  # combo name -> rendered kernel module
    binaries: dict = field(default_factory=dict)  # combo name -> compiler.Binary
    trace_cached: bool = False
    max_tokens: int | None = None  # dynamic axes: the size class's bound (Specialization.max_tokens)


@dataclass
class Contents:
    """The package's manifest and every file it names, by path inside the package."""

    manifest: m.Manifest
    files: dict[str, bytes]
    images_shared: int  # kernel images found identical to one stored already


class _Files:
    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.sources: dict[str, str] = {}  # kernel image path -> the source it was compiled from
        self._by_digest: dict[str, str] = {}
        self.shared = 0

    def image(self, path: str, data: bytes) -> tuple[str, str]:
        """(path, sha256) of a kernel image, stored once by content."""
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._by_digest:
            self.shared += 1
        else:
            self._by_digest[digest] = path
            self.files[path] = data
        return self._by_digest[digest], digest

    def program(self, text: str) -> str:
        module = "program_" + hashlib.sha256(text.encode()).hexdigest()[:12]
        self.files[f"{module}.py"] = text.encode()
        return module


def stats(plan: Plan) -> m.Stats:
    load, graph = plan.load, plan.graph
    largest = {axis.name: axis.max for axis in graph.dynamic.axes} if graph.dynamic else {}
    return m.Stats(kernels=plan.kernel_launches, combos=len(plan.call_combos), extern_calls=plan.extern_calls,
                   load_launches=load.launches if load else 0, load_bytes=load.held_bytes if load else 0,
                   peak_bytes=peak_bytes(graph, list(plan.call_ops), set(graph.outputs), largest))


def _kernel(combo, binary, image: str, sha256: str) -> m.ComboKernel:
    params = tuple("ptr" if t.startswith("*") else t for t in combo_signature(combo)[0].values())
    subs = tuple(m.SubKernel(kernel=s.kernel.name, heuristic=s.kernel.heuristic, numel=dict(s.kernel.numels),
                             block=dict(s.blocks.constexprs), programs=s.blocks.programs, axes=s.blocks.axes,
                             num_warps=s.blocks.num_warps) for s in combo.subs)
    return m.ComboKernel(name=combo.name, function=binary.name, image=image, sha256=sha256, grid=(combo.grid, 1, 1),
                    dynamic_grid=combo.dynamic, num_warps=binary.num_warps, shared=binary.shared, params=params,
                    global_scratch=binary.global_scratch, profile_scratch=binary.profile_scratch,
                    dispatch=combo.dispatch, level=combo.level, subs=subs, registers=binary.registers,
                    local_bytes=binary.spills, stack_bytes=binary.stack, pdl=binary.pdl)


def _schedule(plan: Plan) -> tuple[m.Step, ...]:
    steps = []
    for op, level in zip(plan.call_ops, plan.levels[len(plan.load_ops):]):
        if isinstance(op, ComboLaunch):
            steps.append(m.Step("combo", op.combo, level))
        elif isinstance(op, g.Extern):
            steps.append(m.Step("extern", op.op, level))
    return tuple(steps)


def _variant(v: VariantBuild, key: str, files: _Files, prefix: str) -> m.ArchVariant:
    kernels = []
    for combo in v.plan.combos:
        binary = v.binaries[combo.name]
        if key == "ptx":
            data = binary.ptx.encode()
            path = f"kernels/ptx/{prefix}{combo.name}.ptx"
        else:
            data = binary.cubin
            path = f"kernels/{key}/{prefix}{combo.name}.cubin"
        stored, digest = files.image(path, data)
        if key != "ptx":  # its source, once per image (a shared image: the first combo's)
            files.sources.setdefault(stored, v.sources[combo.name])
        kernels.append(_kernel(combo, binary, stored, digest))
    return m.ArchVariant(program=files.program(v.program), kernels=tuple(kernels), schedule=_schedule(v.plan),
                         stats=stats(v.plan), prepare_key=_prepare_key(v))


def _prepare_key(v: VariantBuild) -> str | None:
    """A hash of the program's ``prepare`` and the sources of the kernels it launches (the
    plan's first): equal for two buckets whose work on the weights is the same."""
    if v.plan.load is None:
        return None
    start, end = v.program.index("\ndef prepare("), v.program.index("\ndef forward(")
    text = v.program[start:end] + "".join(v.sources[c.name] for c in v.plan.combos[:v.plan.load.combos])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _inputs(graph: g.Graph, names: tuple[str, ...]) -> tuple[m.Input, ...]:
    """The user inputs, by the names forward gives them (``names``, in order)."""
    mutated, direct = {name for name, _ in graph.mutations}, g.kernel_only_inputs(graph)
    user = sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)
    return tuple(m.Input(name=names[i.key], dtype=i.spec.dtype, shape=i.spec.shape, stride=i.spec.stride, align=16,
                         mutated=i.name in mutated, direct=i.name in direct) for i in user)


def _specialization(batch: int | None, max_tokens: int | None, variants: list[VariantBuild], files: _Files,
                    names: tuple[str, ...]) -> m.Specialization:
    """One input shape (or size class): a variant per cubin arch, and the PTX of the lowest arch
    where it can run on a GPU no cubin fits (below ``ARCH_SPECIFIC_FROM``: sm_90a's PTX runs on
    sm_90 alone, where the cubin is; it made a third of a dynamic BERT wheel's kernel bytes)."""
    prefix = (f"b{batch}_" if batch is not None else "") + (f"t{max_tokens}_" if max_tokens is not None else "")
    entries = {f"sm_{v.arch}": _variant(v, f"sm_{v.arch}", files, prefix) for v in variants}
    lowest = min(variants, key=lambda v: v.arch)
    if lowest.arch < ARCH_SPECIFIC_FROM:
        entries["ptx"] = _variant(lowest, "ptx", files, prefix)
    return m.Specialization(batch=batch, inputs=_inputs(lowest.plan.graph, names), variants=entries,
                            max_tokens=max_tokens)


def _tensor(name: str, t, external: bool, rows: dict, same_as: str | None, shard_dim: int | None) -> m.Weight:
    parts = linears.parts(name) or ()
    return m.Weight(name, str(t.dtype).removeprefix("torch."), tuple(t.shape), external, tuple(parts),
                    tuple(rows[p] for p in parts), same_as, shard_dim)


def tied(weights: dict) -> dict[str, str]:
    """Each weight that is an earlier one (``state.view_key``: tied weights), by name: that
    earlier name. On the meta device, where storages have no address, one storage object."""
    first: dict[tuple, str] = {}
    found = {}
    for name, t in weights.items():
        key = view_key(t) if t.device.type != "meta" else \
            ("meta", id(t.untyped_storage()), t.dtype, t.storage_offset(), tuple(t.shape), t.stride())
        if key is None:
            continue
        if key in first:
            found[name] = first[key]
        else:
            first[key] = name
    return found


def assemble(name: str, version: str, archs, shapes: m.ShapeMode, variants: list[VariantBuild],
             weights: dict, weights_file: bytes | None, input_names: tuple[str, ...],
             external=frozenset(), part_rows: dict | None = None, shard_dims: dict | None = None,
             world_size: int = 1) -> Contents:
    """The package's manifest and files (the runtime and ``__init__.py`` excepted: ``wheel``
    adds those). ``weights``: the model's tensors by name, in program order;
    ``weights_file``: the ``torch.save`` of those not ``external`` (None: all are);
    ``input_names``: the user inputs' names (signature.input_names); ``part_rows``: the rows
    of each model tensor a combined weight is made of (kernels/linear/combine.py);
    ``shard_dims``: tensor parallel over ``world_size`` ranks, each split weight's dim (``weights``
    holds one rank's tensors, ``weights_file`` the whole ones)."""
    files = _Files()
    by_shape: dict = {}
    for v in variants:
        by_shape.setdefault((v.batch, v.max_tokens), []).append(v)
    # by batch; a size class before the class of every size
    order = sorted(by_shape, key=lambda key: (key[0] or 0, key[1] is None, key[1] or 0))
    specializations = tuple(_specialization(*key, by_shape[key], files, input_names) for key in order)
    if weights_file is not None:
        files.files[WEIGHTS_FILE] = weights_file
    files.files[SOURCES_FILE] = (json.dumps(files.sources, indent=1, sort_keys=True) + "\n").encode()
    state = variants[0].plan.graph.state
    ties = tied(weights)
    versions = tool_versions()
    manifest = m.Manifest(
        name=name,
        version=version,
        built_with={"aotcombo": versions["aotcombo"], "torch": versions["torch"], "triton": versions["triton"] or "?"},
        torch=RUNTIME_TORCH,
        archs=tuple(archs),
        ptx_arch=min(archs),
        shapes=shapes,
        specializations=specializations,
        weights=m.Weights(
            file=WEIGHTS_FILE if weights_file is not None else None,
            tensors=tuple(_tensor(name, t, name in external, part_rows or {}, ties.get(name),
                                  (shard_dims or {}).get(name)) for name, t in weights.items()),
            file_bytes=len(weights_file or b""), sha256=hashlib.sha256(weights_file or b"").hexdigest(),
            state=tuple(name for name in weights if name in state)),
        extern_ops=tuple(sorted({op.op for v in variants for op in v.plan.ops if isinstance(op, g.Extern)})),
        world_size=world_size,
    )
    return Contents(manifest, files.files, files.shared)
