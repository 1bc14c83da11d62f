"""The build pipeline: trace -> plan -> codegen -> compile -> package.

``build_package(model, example_inputs, ...)`` returns a ``BuildResult`` (the
wheel's path, every variant's plan, sources and binaries, the weights, timings
and cache statistics); ``aotcombo.build(...)`` is the short form that returns
the wheel's path.

Each stage is its own module; this one wires them together, per target arch,
through the build cache (``cache.py``), and writes the manifest the runtime
and ``aotcombo inspect`` read.
"""

from __future__ import annotations

import operator
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from . import __version__
from . import codegen, compiler, graph as g, plan as plan_mod
from .errors import EnvironmentError_, UnsupportedModelError, UsageError
from .progress import Reporter

DEFAULT_ARCHS = ("sm_80", "sm_90")


@dataclass
class Variant:
    """Everything built for one arch."""

    arch: int
    plan: plan_mod.Plan
    program: str
    sources: dict[str, str]  # combo name -> rendered module
    binaries: dict[str, compiler.Binary] = field(default_factory=dict)
    trace_cached: bool = False
    batch: int | None = None  # the bucket's batch size (bucketed builds)


@dataclass
class BuildResult:
    wheel: Path
    variants: list[Variant]
    weights: list[torch.Tensor]  # in program order
    timings: dict[str, float]
    manifest: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)  # hits and misses of this build

    def summary(self) -> dict:
        v = self.variants[0]
        return {
            "kernels": v.plan.kernel_launches,
            "combos": len(v.plan.combos),
            "extern_calls": v.plan.extern_calls,
            "launches_per_forward": len(v.plan.combos) + v.plan.extern_calls,
        }


def check_environment() -> None:
    from .inductor_bridge import SUPPORTED_TORCH

    if not torch.__version__.startswith(SUPPORTED_TORCH + "."):
        raise EnvironmentError_(
            f"aotcombo {__version__} builds with torch {SUPPORTED_TORCH}.x; this environment has torch {torch.__version__}",
            fix=f"pip install 'torch=={SUPPORTED_TORCH}.*' in the build environment (the runtime of the built "
            "package works with other torch versions)",
        )
    import importlib.util

    for module, requirement in (("triton", "triton==3.8.*"), ("jinja2", "jinja2>=3.1"), ("sympy", "sympy>=1.13")):
        try:
            found = importlib.util.find_spec(module) is not None  # found, not imported: sympy alone takes 0.6 s
        except (ImportError, ValueError):  # ValueError: sys.modules[module] is None
            found = False
        if not found:
            raise EnvironmentError_(
                f"{module} is not installed in this environment ({sys.executable}); aotcombo needs it to build",
                fix=f"pip install '{requirement}' (or reinstall aotcombo with its dependencies)",
            )


def parse_archs(archs: Sequence[str | int]) -> list[int]:
    if isinstance(archs, (str, int)):
        archs = [archs]
    parsed = []
    for a in archs:
        try:
            value = a if isinstance(a, int) else compiler.parse_arch(str(a))
        except ValueError as exc:
            raise UsageError(str(exc), fix="pass --arch as a comma-separated list such as sm_80,sm_90") from None
        if value not in compiler.supported_archs():
            known = ", ".join(f"sm_{x}" for x in compiler.supported_archs())
            raise UsageError(f"unknown or unsupported arch sm_{value}", fix=f"choose among {known}")
        parsed.append(value)
    if not parsed:
        raise UsageError("no arch given", fix="pass --arch sm_80,sm_90")
    return sorted(set(parsed))


# --- trace, through the cache --------------------------------------------------------


def _weights_of(model, graph, constants: dict) -> dict | None:
    """The model's tensors for the graph's weight inputs (None if one is missing).

    ``constants``: tensors that are not attributes of the model (literals of its
    ``forward`` that export lifted), stored with the cached trace."""
    weights = {}
    for i in graph.inputs:
        if i.kind != "weight":
            continue
        try:
            weights[i.key] = operator.attrgetter(i.key)(model).detach()
        except AttributeError:
            if i.key not in constants:
                return None
            weights[i.key] = _tensor_from_plain(constants[i.key])
    return weights


def _lifted_constants(model, weights: dict) -> dict:
    """The weights a trace found that are not attributes of the model, as plain data."""
    out = {}
    for key, tensor in weights.items():
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


def _fits(graph, inputs, weights) -> bool:
    """A cached graph's inputs still describe the model's (a second look past the key)."""
    user = sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)
    if len(user) != len(inputs):
        return False
    for i, t in zip(user, inputs):
        shape = tuple(d if traced == "batch" else traced for d, traced in zip(t.shape, i.spec.shape))
        if (tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix("torch.")) != (
                shape, i.spec.stride, i.spec.dtype):
            return False
    for i in graph.inputs:
        if i.kind == "weight":
            t = weights[i.key]
            if (tuple(t.shape), str(t.dtype).removeprefix("torch.")) != (i.spec.shape, i.spec.dtype):
                return False
    return True


def _trace_keys(model, inputs, archs, cache, model_file, reporter, dynamic=None) -> dict:
    """Trace cache keys for every arch, computed before any trace (a trace imports
    Inductor, whose configs are part of the key once imported)."""
    from .cache import Uncacheable, trace_keys

    if not cache.enabled:
        return {a: None for a in archs}
    try:
        return trace_keys(model, inputs, archs, model_file, extra=dynamic)
    except Uncacheable as exc:
        reporter.detail(f"traces are not cached for this model: {exc}")
        return {a: None for a in archs}


def _trace(model, inputs, arch, cache, key, reporter, where: str, dynamic=None) -> tuple:
    """``(graph, weights, structure, cached)`` for ``sm_{arch}`` (``where`` names it in messages)."""
    if key is not None:
        entry = cache.get_trace(key)
        if entry is not None:
            graph, structure = entry["graph"], entry["structure"]
            weights = _weights_of(model, graph, entry.get("constants") or {})
            if graph.arch == arch and graph.dynamic == dynamic and weights is not None and _fits(graph, inputs, weights):
                reporter.line(f"trace for {where}: from the build cache")
                return graph, weights, structure, True
            reporter.detail(f"{where}: the cached trace does not fit the model; tracing again")
    from . import inductor_bridge

    with reporter.stage(f"trace for {where}", timing_key="trace"):
        graph, weights, structure = inductor_bridge.trace(model, inputs, arch, dynamic=dynamic)
    entry = {"graph": graph, "structure": structure, "constants": _lifted_constants(model, weights)}
    if key is not None and not cache.put_trace(key, entry):
        reporter.detail(f"{where}: the trace holds values the build cache does not store; not cached")
    return graph, weights, structure, False


# --- manifest ------------------------------------------------------------------------


def _levels(plan) -> dict[int, int]:
    """Dependency level (ASAP) of every op of the traced graph, by ``id(op)``."""
    graph = plan.graph
    level = plan_mod.levels(plan_mod.dependencies(graph))
    return {id(op): lv for op, lv in zip(graph.ops, level)}


def _kernel_entries(variant: Variant, image_of) -> list[dict]:
    level_of = _levels(variant.plan)
    entries = []
    for combo in variant.plan.combos:
        b = variant.binaries[combo.name]
        entries.append(
            {
                "name": combo.name,
                "image": image_of(combo.name),
                "function": b.name,
                "grid": [combo.grid, 1, 1],  # with a dynamic batch: the largest, at the top of its range
                "dynamic_grid": combo.dynamic,  # the program passes each launch's grid first
                "num_warps": b.num_warps,
                "shared": b.shared,
                "params": ["ptr" if t.startswith("*") else t for t in codegen.combo_signature(combo)[0].values()],
                "global_scratch": list(b.global_scratch),
                "profile_scratch": list(b.profile_scratch),
                "sub_kernels": [s.kernel.name for s in combo.subs],
                "dispatch": combo.dispatch,
                "level": level_of.get(id(combo.subs[0].launch)),
                "registers": b.registers,
                "local_bytes": b.spills,
                "stack_bytes": b.stack,
                "blocks": [
                    {
                        "kernel": s.kernel.name,
                        "heuristic": s.kernel.heuristic,
                        "numel": dict(s.kernel.numels),
                        "block": dict(s.blocks.constexprs),
                        "programs": s.blocks.programs,
                        "axes": list(s.blocks.axes),
                        "num_warps": s.blocks.num_warps,
                    }
                    for s in combo.subs
                ],
            }
        )
    return entries


def _schedule(variant: Variant) -> list[dict]:
    """The forward's launches in order: combo kernels and extern calls, with levels."""
    level_of = _levels(variant.plan)
    out = []
    for op in variant.plan.ops:
        if isinstance(op, plan_mod.ComboLaunch):
            combo = next(c for c in variant.plan.combos if c.name == op.combo)
            out.append({"combo": op.combo, "level": level_of.get(id(combo.subs[0].launch))})
        elif isinstance(op, g.Extern):
            out.append({"extern": op.op, "level": level_of.get(id(op))})
    return out


def _stats(plan) -> dict:
    return {
        "kernels": plan.kernel_launches,
        "combos": len(plan.combos),
        "extern_calls": plan.extern_calls,
        "launches_per_forward": len(plan.combos) + plan.extern_calls,
        "launches_uncombined": plan.kernel_launches + plan.extern_calls,
    }


def _program_module(text: str) -> str:
    import hashlib

    return "program_" + hashlib.sha256(text.encode()).hexdigest()[:12]


class _Files:
    """The package's programs, kernel images and kernel sources, each stored once by content:
    buckets whose kernels compile to the same bytes share one file."""

    def __init__(self):
        self.programs: dict[str, str] = {}
        self.images: dict[str, bytes] = {}
        self.sources: dict[str, str] = {}
        self._image_paths: dict[bytes, str] = {}
        self.shared = 0  # kernel images found identical to one stored already

    def image(self, path: str, data: bytes) -> str:
        import hashlib

        digest = hashlib.sha256(data).digest()
        if digest not in self._image_paths:
            self._image_paths[digest] = path
            self.images[path] = data
        else:
            self.shared += 1
        return self._image_paths[digest]

    def program(self, text: str) -> str:
        module = _program_module(text)
        self.programs[module] = text
        return module


def _shape_entry(variants: list[Variant], files: _Files, prefix: str = "") -> dict:
    """The manifest's description of one input shape: its inputs and its variants (one per
    cubin arch, and the PTX of the lowest)."""
    entry_variants = {}
    for v in variants:
        key = f"sm_{v.arch}"
        paths = {}
        for c in v.plan.combos:
            paths[c.name] = files.image(f"kernels/{key}/{prefix}{c.name}.cubin", v.binaries[c.name].cubin)
            files.sources[f"kernels/{key}/{prefix}{c.name}.py"] = v.sources[c.name]
        entry_variants[key] = {
            "program": files.program(v.program),
            "kernels": _kernel_entries(v, paths.__getitem__),
            "schedule": _schedule(v),
            "stats": _stats(v.plan),
        }
    ptx_variant = variants[0]
    paths = {c.name: files.image(f"kernels/ptx/{prefix}{c.name}.ptx", ptx_variant.binaries[c.name].ptx.encode())
             for c in ptx_variant.plan.combos}
    entry_variants["ptx"] = {
        "program": files.program(ptx_variant.program),
        "kernels": _kernel_entries(ptx_variant, paths.__getitem__),
        "schedule": _schedule(ptx_variant),
        "stats": _stats(ptx_variant.plan),
    }
    graph = ptx_variant.plan.graph
    user_inputs = sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)
    mutated = {name for name, _ in graph.mutations}
    return {
        "inputs": [
            {
                "name": i.name,
                "shape": list(i.spec.shape),
                "stride": list(i.spec.stride),
                "dtype": i.spec.dtype,
                "align": 16,
                "mutated": i.name in mutated,
            }
            for i in user_inputs
        ],
        "variants": entry_variants,
        "stats": _stats(ptx_variant.plan),
    }


def _manifest(name, version, archs, variants, weight_tensors, weights_file_bytes,
              batch: dict | None = None) -> tuple[dict, dict, dict, dict]:
    """The manifest and the package's files. ``batch``: the batched inputs and, for a
    dynamic batch, its ``range``; for buckets, the batched outputs and the padding choice,
    each bucket's entry under ``buckets`` and the largest also at the top level (what
    ``inspect`` shows)."""
    files = _Files()
    by_batch: dict = {}
    for v in variants:
        by_batch.setdefault(v.batch, []).append(v)
    entries = {b: _shape_entry(vs, files, prefix=f"b{b}_" if b is not None else "") for b, vs in by_batch.items()}
    top = max(entries, key=lambda b: b or 0)
    ptx_variant = by_batch[top][0]
    manifest = {
        "format": 1,
        "name": name,
        "version": version,
        "versions": {"aotcombo": __version__, "torch": torch.__version__, "triton": _triton_version()},
        "archs": archs,
        "ptx_arch": ptx_variant.arch,
        "inputs": entries[top]["inputs"],
        "weights": "weights.pt",
        "extern_ops": sorted({op.op for v in variants for op in v.plan.ops if hasattr(op, "op")}),
        "stats": {
            **entries[top]["stats"],
            "weight_tensors": len(weight_tensors),
            "weights_bytes": sum(w.numel() * w.element_size() for w in weight_tensors),
            "weights_file_bytes": weights_file_bytes,
        },
        "variants": entries[top]["variants"],
    }
    if batch is not None and "range" in batch:  # a dynamic batch: one shape, sizes in a range
        manifest["batch"] = batch
    elif batch is not None:
        manifest["batch"] = {**batch, "sizes": sorted(entries), "images": len(files.images),
                             "images_shared": files.shared}
        manifest["buckets"] = {str(b): entry for b, entry in sorted(entries.items())}
    return manifest, files.programs, files.images, files.sources


def _triton_version() -> str:
    try:
        import triton

        return triton.__version__
    except ImportError:  # pragma: no cover - check_environment found it
        return "?"


# --- the pipeline -------------------------------------------------------------------------


def _job_label(variant: Variant, combo: str) -> str:
    return f"sm_{variant.arch}/{combo}" if variant.batch is None else f"batch{variant.batch}/sm_{variant.arch}/{combo}"


def _flat_eager(model):
    """``run(inputs)``: the model's outputs in eager mode on the CPU, as a flat list of tensors."""

    def run(inputs):
        with torch.no_grad():
            out = model(*inputs)
        return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]

    return run


def _shapes(model, inputs, batch, pad, make_inputs, dynamic, reporter) -> tuple[dict, dict | None]:
    """The input shapes to build, ``{batch size or None: example inputs}``, and the
    manifest's ``batch`` entry (None for a single-shape build)."""
    from . import shapes

    if dynamic is not None:
        if batch is not None or pad:
            raise UsageError("--dynamic goes without --batch and --pad", fix="choose buckets or a dynamic batch")
        low, high = dynamic
        if high < 2:
            raise UsageError(f"--dynamic batch={low}:{high} holds one size", fix=f"build with --batch {high}")
        traced = min(max(2, low), high - 1)  # torch specializes sizes 0 and 1: trace at 2 or more
        by_size, batched = shapes.example_inputs_by_size(inputs, [traced, traced + 1], make_inputs)
        return {None: by_size[traced]}, {"dim": 0, "inputs": batched, "range": [low, high]}
    if batch is None:
        if pad:
            raise UsageError("--pad needs --batch", fix="pass --batch with the bucket sizes, e.g. --batch 1,2,4,8")
        return {None: inputs}, None
    sizes = shapes.parse_batch(batch)
    by_size, batched = shapes.example_inputs_by_size(inputs, sizes, make_inputs)
    outputs: list[int] = []
    if pad:
        with reporter.stage("check that padding the batch keeps each row's outputs", timing_key="load"):
            outputs = shapes.check_padding(_flat_eager(model), by_size, batched)
    return by_size, {"dim": 0, "inputs": batched, "outputs": outputs, "pad": bool(pad)}


def build_package(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    arch: Sequence[str | int] | str = DEFAULT_ARCHS,
    name: str = "model",
    out: str | Path = "dist",
    dispatch: str = "sequential",
    version: str = "0.1.0",
    reporter: Reporter | None = None,
    cache: bool | str | Path | None = True,
    jobs: int | None = None,
    model_file: str | Path | None = None,
    batch: Sequence[int] | str | None = None,
    pad: bool = False,
    make_inputs=None,
    dynamic: tuple[int, int] | None = None,
    native: bool | None = None,
) -> BuildResult:
    """Build an installable wheel of ``model`` for ``example_inputs``' shapes.

    ``cache``: ``True`` uses the build cache (see ``aotcombo.cache``), ``False``
    neither reads nor writes it, a path uses that folder. ``jobs``: kernels
    compiled at once (default: the CPUs this process may use; 1: no worker
    processes). ``model_file``: the file the model came from, part of the trace
    cache key. ``batch``: batch sizes to build a bucket each for (see ``aotcombo.shapes``);
    ``make_inputs(batch)`` makes the example inputs of a size (default: cut or tiled from
    ``example_inputs``); ``pad``: run sizes between buckets padded to the next one.
    ``dynamic=(min, max)``: one build whose batch is a run-time size in that range.
    ``native=False``: no C launcher in the wheel (see ``package.package_files``)."""
    from .cache import Cache
    from .package import check_name, check_out_dir, check_version, package_files, save_weights, write_wheel

    started = time.perf_counter()
    reporter = reporter or Reporter(quiet=True)
    check_environment()
    archs = parse_archs(arch)
    check_name(name)
    version = check_version(version)
    if dispatch not in plan_mod.DISPATCHES:
        raise UsageError(f"unknown dispatch {dispatch!r}", fix=f"choose among {', '.join(plan_mod.DISPATCHES)}")
    out = check_out_dir(out)
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs {jobs}: need at least 1", fix="pass --jobs 1 to compile in this process only")
    cache = Cache.from_options(cache, warn=reporter.warning)
    model = model.eval()
    inputs = tuple(example_inputs)
    parallel = jobs or compiler.default_jobs()

    shapes, batch_info = _shapes(model, inputs, batch, pad, make_inputs, dynamic, reporter)
    symbolic = (tuple(batch_info["inputs"]), *batch_info["range"]) if batch_info and "range" in batch_info else None
    variants: list[Variant] = []
    weights = None
    keys = {b: _trace_keys(model, shape_inputs, archs, cache, model_file, reporter, symbolic)
            for b, shape_inputs in shapes.items()}
    steps = [(b, a) for b in shapes for a in archs]
    with tempfile.TemporaryDirectory(prefix="aotcombo-build-") as tmp:
        scheduler = compiler.Scheduler(cache, parallel, reporter, triton_cache_dir=str(Path(tmp) / "triton"))
        try:
            for index, (b, a) in enumerate(steps):
                where = f"sm_{a}" if b is None else f"batch {b}, sm_{a}"
                graph, shape_weights, structure, cached = _trace(model, shapes[b], a, cache, keys[b][a], reporter,
                                                                 where, symbolic)
                if weights is not None and list(shape_weights) != list(weights):
                    raise UnsupportedModelError(f"{where}: the traced graph takes other weights than batch "
                                                f"{variants[0].batch}'s", fix="build each batch size apart")
                weights = shape_weights
                plan = plan_mod.make_plan(graph, dispatch=dispatch)
                reporter.detail(
                    f"{where}: {plan.kernel_launches} kernels -> {len(plan.combos)} combo launches, "
                    f"{plan.extern_calls} extern calls"
                )
                sources = {c.name: codegen.render_combo(c) for c in plan.combos}
                program = codegen.render_program(plan, structure, name)
                variant = Variant(a, plan, program, sources, trace_cached=cached, batch=b)
                variants.append(variant)
                for combo in plan.combos:
                    signature, aligned = codegen.combo_signature(combo)
                    scheduler.add(compiler.Job(
                        _job_label(variant, combo.name), sources[combo.name], combo.name, tuple(signature.items()),
                        tuple(aligned), a, combo.num_warps,
                    ))
                # Workers, if the compiles ahead are worth them: they start while the
                # next shape or arch is traced, and take this one's kernels meanwhile.
                scheduler.plan_pool(archs_left=len(steps) - index - 1)
            total = sum(len(v.plan.combos) for v in variants)
            misses = scheduler.total
            what = f"{total} kernels for {', '.join(f'sm_{a}' for a in archs)}"
            if len(shapes) > 1:
                what += f" x {len(shapes)} batch sizes"
            if misses < total:
                what += f", {total - misses} from the build cache"
            with reporter.stage(f"compile {what}", timing_key="compile"):
                binaries = scheduler.finish()
        finally:
            scheduler.close(kill=True)

    for v in variants:
        v.binaries = {c.name: binaries[_job_label(v, c.name)] for c in v.plan.combos}
    graph = variants[0].plan.graph
    weight_tensors = [weights[i.key] for i in graph.inputs if i.kind == "weight"]
    with reporter.stage("package wheel", timing_key="package"):
        weights_file = save_weights(weight_tensors)
        manifest, programs, images, sources = _manifest(name, version, archs, variants, weight_tensors,
                                                        len(weights_file), batch_info)
        files = package_files(name, manifest, programs, images, sources, weights_file, native)
        wheel = write_wheel(out, name, version, files)
    stats = {
        "enabled": cache.enabled,
        "dir": str(cache.root) if cache.enabled else None,
        "traces_cached": sum(v.trace_cached for v in variants),
        "traces": len(variants),
        "kernels_cached": scheduler.cached,
        "kernels_compiled": scheduler.compiled,
    }
    timings = dict(reporter.timings)
    timings["total"] = time.perf_counter() - started
    reporter.line(f"wrote {wheel}")
    return BuildResult(wheel=wheel, variants=variants, weights=weight_tensors, timings=timings,
                       manifest=manifest, cache=stats)
