"""The build as a list of named stages run by one loop:

    inputs -> variants (per input shape x arch: trace -> kernels -> plan -> codegen) -> compile -> package

``build_package(model, example_inputs, **options)`` returns a ``BuildResult`` (the wheel's
path, every variant's plan, sources and binaries, the manifest, timings and cache
statistics); ``aotcombo.build(...)`` is the short form that returns the wheel's path. Each
stage is a function of ``Build``, the state the stages before it filled in; the work itself
lives in the folder of the same name.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..errors import BuildError, UnsupportedModelError, UsageError
from ..progress import Reporter
from ..runtime.manifest import Dynamic, Manifest, dynamic_axes
from . import kernels
from .cache.store import Cache
from .codegen.check import check_on_meta
from .codegen.combo import PDL_MIN_ARCH, early_launches, render_combo
from .codegen.program import render_program
from .compile.jobs import Jobs, label
from .compile.scheduler import Scheduler, default_jobs
from .inputs import shapes as shapes_mod
from .inputs.environment import check_environment
from .inputs.keywords import bind, positional
from .inputs.modelfile import on_meta
from .inputs.options import BuildOptions
from .inputs.signature import input_names
from .kernels.linear.dynamic_rows import size_classes
from .kernels.linear.subclasses import flatten as flatten_subclasses
from .package import weights as weights_policy
from .package.manifest import VariantBuild, assemble, stats
from .package.wheel import save_weights, write_wheels
from .parallel.shard import Sharding, shard_model
from .plan.combos import make_plan
from .trace import forked
from .trace.cached import trace_beside, trace_keys, trace_stage
from .trace.collectives import fake_process_group


@dataclass
class BuildResult:
    wheel: Path  # the wheel that installs anywhere (pure Python, ctypes launcher)
    variants: list[VariantBuild]
    weights: list[torch.Tensor]  # in program order (tensor parallel: whole; ``rank_weights`` cuts a rank's)
    manifest: Manifest
    timings: dict[str, float]
    wheels: list[Path] = field(default_factory=list)  # every wheel written: the pure one, and a native one
    cache: dict = field(default_factory=dict)  # hits and misses of this build

    def rank_weights(self, rank: int) -> list[torch.Tensor]:
        """The weights rank ``rank`` of a tensor-parallel package runs on, cut as its load does."""
        from ..runtime.parallel import rank_slice

        world = self.manifest.world_size
        return [rank_slice(w, t, rank, world) for w, t in zip(self.manifest.weights.tensors, self.weights)]

    def summary(self) -> dict:
        s, first = stats(self.variants[0].plan), self.variants[0]
        classes = {v.max_tokens: stats(v.plan).launches_per_forward for v in self.variants[1:]
                   if v.max_tokens is not None and v.arch == first.arch and v.batch == first.batch}
        return {"kernels": s.kernels, "combos": s.combos, "extern_calls": s.extern_calls,
                "launches_per_forward": s.launches_per_forward, "load_launches": s.load_launches,
                "size_classes": classes}  # a size class's most tokens -> its launches per forward


@dataclass
class Build:
    """What one build has made so far: each stage reads it and adds its part."""

    model: torch.nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    options: BuildOptions
    reporter: Reporter
    model_file: str | Path | None
    make_inputs: Callable | None
    scratch: Path  # the build's temporary folder
    dynamic_axes: dict | None = None  # the model's named axes: {input name: {dim: axis}}
    tp_plan: dict | None = None  # the tensor-parallel plan (parallel/plan.py; None: the default)
    sharding: Sharding | None = None  # what --tensor-parallel split (parallel/shard.py)
    cache: Cache | None = None
    by_batch: dict = field(default_factory=dict)  # batch (None: one shape) -> example inputs at it
    shapes: object = None  # the manifest's ShapeMode
    classes: tuple = (None,)  # dynamic axes: the size classes traced (kernels/linear/dynamic_rows.py)
    keys: dict = field(default_factory=dict)  # (batch, size class) -> arch -> trace cache key
    jobs: Jobs | None = None
    variants: list[VariantBuild] = field(default_factory=list)
    weights: dict | None = None  # weight name -> the model's tensor, every weight the trace found
    named: dict = field(default_factory=dict)  # the weights the program takes, in its order
    whole: dict = field(default_factory=dict)  # the same, whole (tensor parallel: ``named`` holds rank 0's)
    checked: set = field(default_factory=set)  # programs checked on meta tensors
    wheels: list[Path] = field(default_factory=list)
    manifest: Manifest | None = None

    @property
    def dynamic(self) -> Dynamic | None:
        return dynamic_axes(self.shapes)


def _inputs(build: Build) -> None:
    """The environment, the build cache, the example inputs per shape, the trace keys."""
    check_environment()
    build.cache = Cache.from_options(build.options.cache, warn=build.reporter.warning)
    build.model = flatten_subclasses(build.model.eval(), build.options.archs)  # torchao's weights: plain tensors
    weights_policy.check_meta(build.model, build.options.weights)
    if getattr(build.options.shapes, "pad", False) and on_meta(build.model):
        raise UsageError("--pad checks padding by running the model on the CPU; a model with tensors on the meta "
                         "device cannot run", fix="build without --pad, listing every size in --batch or --buckets")
    build.by_batch, build.shapes = shapes_mod.specialize(build.model, build.example_inputs, build.options.shapes,
                                                         build.make_inputs, build.reporter, build.dynamic_axes)
    if build.options.tensor_parallel > 1:  # the model as rank 0 sees it; every rank runs its program
        build.sharding = shard_model(build.model, build.tp_plan, build.options.tensor_parallel)
        build.reporter.detail(f"tensor parallel: {len(build.sharding.layers)} layers and "
                              f"{len(build.sharding.dims)} tensors split over {build.options.tensor_parallel} ranks")
    # Before any trace: a trace imports Inductor, whose configs are part of the key once imported.
    few_tokens = isinstance(build.shapes, Dynamic) and not build.sharding  # tensor parallel: unmeasured there
    build.classes = size_classes(build.dynamic) if few_tokens else (None,)
    build.keys = {(b, t): trace_keys(build.model, inputs, build.options.archs, build.cache, build.model_file,
                                     build.reporter, build.dynamic, build.sharding and build.sharding.key, t)
                  for b, inputs in build.by_batch.items() for t in build.classes}


def _variants(build: Build) -> None:
    """Per input shape and arch: trace, our kernels, plan, codegen; its compiles queued."""
    options, reporter = build.options, build.reporter
    scheduler = Scheduler(build.cache, options.jobs or default_jobs(), reporter,
                          triton_cache_dir=str(build.scratch / "triton"))
    build.jobs = Jobs(scheduler)
    steps = [(b, a) for b in build.by_batch for a in options.archs]
    beside = len(steps) > 1 and forked.available()  # steps traced two at a time
    if len(steps) == 1 and len(build.classes) > 1:
        # Two traces side by side, then kernels to compile: the workers import torch and
        # triton now, on a CPU the export leaves idle. BERT-base, --dynamic batch=1:32,seq=1:512
        # on 2 CPUs: its 12 kernels' compile 2.0-2.2 -> 1.3 s after the trace.
        scheduler.start_pool()
    unused = set()  # size classes with no kernel of ours: the program for every size serves them
    ahead = made = None  # the next step's traces, made meanwhile in a child (trace_beside)
    try:
        for index, (batch, arch) in enumerate(steps):
            classes = tuple(t for t in build.classes if t not in unused)
            at = f"sm_{arch}" if batch is None else f"{build.shapes.axis} {batch}, sm_{arch}"
            names = [at + (f", calls of up to {t} tokens" if t is not None and len(build.classes) > 1 else "")
                     for t in classes]
            made, ahead = ahead, None
            if beside and made is None and index + 1 < len(steps):  # this step here, the next one beside it
                after_batch, after_arch = steps[index + 1]
                ahead = trace_beside(build.model, build.by_batch[after_batch], after_arch, build.cache,
                                     [build.keys[after_batch, t][after_arch] for t in build.classes],
                                     build.dynamic, build.classes)
            with forked.disabled() if beside else nullcontext():  # the CPUs are the two steps'
                traces = trace_stage(build.model, build.by_batch[batch], arch, build.cache,
                                     [build.keys[batch, t][arch] for t in classes], reporter, names, build.dynamic,
                                     classes, beside=made)
            for tokens, where, traced in zip(classes, names, traces):
                if not _variant(build, batch, arch, tokens, where, traced):
                    unused.add(tokens)
            # Workers, if the compiles ahead are worth them: they start while the next
            # shape or arch is traced, and take this one's kernels meanwhile.
            scheduler.plan_pool(archs_left=len(steps) - index - 1)
    finally:  # a step that failed: the child tracing beside it is stopped (a no-op once read)
        for child in (made, ahead):
            if child is not None:
                child.stop()


def _variant(build: Build, batch, arch: int, tokens, where: str, traced) -> bool:
    """One traced shape (or size class) and arch: our kernels, plan, codegen; its compiles
    queued. False for a size class with no kernel of ours (the program for every size serves it)."""
    options, reporter = build.options, build.reporter
    if build.weights is not None and list(traced.weights) != list(build.weights):
        raise UnsupportedModelError(f"{where}: the traced graph takes other weights than "
                                    f"{build.shapes.axis} {build.variants[0].batch}'s",
                                    fix="build each size apart")
    build.weights = traced.weights
    plan = make_plan(kernels.lower(traced.graph, tokens), dispatch=options.dispatch)
    if tokens is not None and len(build.classes) > 1 and not any(k.family for k in plan.graph.kernels):
        reporter.detail(f"{where}: no kernel of ours for so few tokens; the one program serves every size")
        return False
    if build.variants and _weight_keys(plan) != _weight_keys(build.variants[0].plan):
        raise BuildError(f"{where}: the program reads other weights, or in another order, than the first one "
                         "built, which every program of the package shares", fix="report it with the model")
    reporter.detail(f"{where}: {plan.kernel_launches} kernels -> {len(plan.call_combos)} combo launches, "
                    f"{plan.extern_calls} extern calls per call"
                    + (f"; at load: {plan.load.launches}" if plan.load else ""))
    program = render_program(plan, traced.structure, options.name)
    if program not in build.checked:
        check_on_meta(program, plan.graph, f"{options.name}_b{batch}_sm{arch}")
        build.checked.add(program)
    pdl = options.pdl and arch >= PDL_MIN_ARCH
    early = early_launches(plan) if pdl else set()
    variant = VariantBuild(arch, batch, plan, program,
                           {c.name: render_combo(c, pdl=c.name in early, trigger=pdl) for c in plan.combos},
                           trace_cached=traced.cached, max_tokens=tokens)
    build.variants.append(variant)
    build.jobs.add(variant)
    return True


def _weight_keys(plan) -> list:
    return [i.key for i in plan.graph.inputs if i.kind == "weight"]


def _compile(build: Build) -> None:
    """Every distinct kernel to cubin and PTX: cache hits, then a process pool or this process."""
    what = build.jobs.describe(build.variants, build.options.archs, getattr(build.shapes, "axis", "batch"))
    with build.reporter.stage(f"compile {what}", timing_key="compile"):
        binaries = build.jobs.finish()
    for v in build.variants:
        v.binaries = {c.name: binaries[label(v, c.name)] for c in v.plan.combos}


def _package(build: Build) -> None:
    """The manifest, the weights the package holds, and the wheels."""
    options = build.options
    named = build.named = {i.key: build.weights[i.key] for i in build.variants[0].plan.graph.inputs
                           if i.kind == "weight"}
    sharding = build.sharding
    whole = build.whole = {name: sharding.whole_of(name, t) for name, t in named.items()} if sharding else named
    with build.reporter.stage("package wheel", timing_key="package"):
        external, packaged, rows = weights_policy.split(build.model, whole, options.weights)
        contents = assemble(options.name, options.version, options.archs, build.shapes, build.variants, named,
                            save_weights(packaged) if packaged or not external else None,
                            input_names(build.model, len(build.example_inputs)), external, rows,
                            sharding.dims_of(named) if sharding else {}, options.tensor_parallel)
        build.wheels = write_wheels(options.out, contents, options.native)
    build.manifest = contents.manifest
    for wheel in build.wheels:
        build.reporter.line(f"wrote {wheel}")


STAGES: tuple[tuple[str, Callable[[Build], None]], ...] = (
    ("inputs", _inputs),
    ("variants", _variants),
    ("compile", _compile),
    ("package", _package),
)


def build_package(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], options: BuildOptions | None = None,
                  *, reporter: Reporter | None = None, model_file: str | Path | None = None, make_inputs=None,
                  dynamic_axes: dict | None = None, tp_plan: dict | None = None, **keywords) -> BuildResult:
    """Build installable wheels of ``model`` for ``example_inputs``' shapes.

    ``options``: a ``BuildOptions``, or its fields as keywords (``arch``, ``name``, ``out``,
    ``version``, ``dispatch``, ``shapes``, ``cache``, ``jobs``, ``native``, ``weights``: see
    ``BuildOptions.checked``). ``model_file``: the file the model came from, part of the
    trace cache key. ``make_inputs(batch)``: the example inputs at a batch size (default:
    cut or tiled from ``example_inputs``; see ``inputs/shapes``). ``dynamic_axes``: the axes
    ``Dynamic`` shapes may name, ``{input name: {dim: axis name}}`` (``inputs/axes``).
    ``tp_plan``: with ``tensor_parallel=N``, which layers to split (``parallel/plan``; None: the
    default plan for Llama-style blocks)."""
    started = time.perf_counter()
    options = options or BuildOptions.checked(**keywords)
    reporter = reporter or Reporter(quiet=True)
    with tempfile.TemporaryDirectory(prefix="aotcombo-build-") as scratch:
        model, example_inputs = bind(model, example_inputs, "example_inputs")  # a dict by name, None left out
        make_inputs = positional(make_inputs)
        build = Build(model, _tensors(example_inputs), options, reporter, model_file, make_inputs, Path(scratch),
                      dynamic_axes=dynamic_axes, tp_plan=tp_plan)
        try:
            with fake_process_group(options.tensor_parallel) if options.tensor_parallel > 1 else nullcontext():
                for _name, stage in STAGES:
                    stage(build)
        finally:
            if build.jobs is not None:
                build.jobs.scheduler.close()
    timings = {**reporter.timings, "total": time.perf_counter() - started}
    scheduler = build.jobs.scheduler
    cache = {"enabled": build.cache.enabled, "dir": str(build.cache.root) if build.cache.enabled else None,
             "traces_cached": sum(v.trace_cached for v in build.variants), "traces": len(build.variants),
             "kernels_cached": scheduler.cached, "kernels_compiled": scheduler.compiled}
    return BuildResult(wheel=build.wheels[0], variants=build.variants, weights=list(build.whole.values()),
                       manifest=build.manifest, timings=timings, wheels=build.wheels, cache=cache)


def _tensors(example_inputs) -> tuple[torch.Tensor, ...]:
    """The example inputs as a tuple of tensors, or a clear error naming the one that is not."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise UsageError(f"example_inputs is a {type(example_inputs).__name__}, not a tuple of tensors",
                         fix="pass a tuple of tensors, one per positional input of forward(), or a dict of "
                             "them keyed by forward's parameter names")
    for i, item in enumerate(example_inputs):
        if not isinstance(item, torch.Tensor):
            raise UsageError(
                f"example input {i} is a {type(item).__name__}, not a tensor: a package's forward takes tensors "
                "(a model taking a list of images, as torchvision's detection models do, is not one)",
                fix="pass a tuple of tensors, one per positional input of forward(); make other values "
                    "constants or attributes of the model")
    return tuple(example_inputs)
