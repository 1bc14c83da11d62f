"""The build: trace -> plan -> render -> compile -> write.

``build_package(model, example_inputs, **options)`` returns a ``BuildResult`` (the
wheel's path, every variant's plan, sources and binaries, the manifest, timings and
cache statistics); ``aotcombo.build(...)`` is the short form that returns the wheel's
path. Each stage is its own module; this one runs them in order, for every input shape
the options ask for and every target arch.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from ..errors import UnsupportedModelError, UsageError
from ..progress import Reporter
from ..runtime.manifest import Dynamic, Manifest
from . import codegen, compiler, linears, plan as plan_mod, shapes as shapes_mod, trace as trace_mod
from .cache import Cache
from .check import check_on_meta
from .environment import check_environment
from .manifest import Variant, assemble, stats
from .signature import input_names
from .options import BuildOptions
from .wheel import save_weights, write_wheels


@dataclass
class BuildResult:
    wheel: Path  # the wheel that installs anywhere (pure Python, ctypes launcher)
    variants: list[Variant]
    weights: list[torch.Tensor]  # in program order
    manifest: Manifest
    timings: dict[str, float]
    wheels: list[Path] = field(default_factory=list)  # every wheel written: the pure one, and a native one
    cache: dict = field(default_factory=dict)  # hits and misses of this build

    def summary(self) -> dict:
        s = stats(self.variants[0].plan)
        return {"kernels": s.kernels, "combos": s.combos, "extern_calls": s.extern_calls,
                "launches_per_forward": s.launches_per_forward}


def _tensors(example_inputs) -> tuple[torch.Tensor, ...]:
    """The example inputs as a tuple of tensors, or a clear error naming the one that is not."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise UsageError(f"example_inputs is a {type(example_inputs).__name__}, not a tuple of tensors",
                         fix="pass a tuple of tensors, one per positional input of forward()")
    for i, item in enumerate(example_inputs):
        if not isinstance(item, torch.Tensor):
            raise UsageError(
                f"example input {i} is a {type(item).__name__}, not a tensor: a package's forward takes tensors "
                "(a model taking a list of images, as torchvision's detection models do, is not one)",
                fix="pass a tuple of tensors, one per positional input of forward(); make other values "
                    "constants or attributes of the model")
    return tuple(example_inputs)


def build_package(model: torch.nn.Module, example_inputs: Sequence[torch.Tensor], options: BuildOptions | None = None,
                  *, reporter: Reporter | None = None, model_file: str | Path | None = None, make_inputs=None,
                  **keywords) -> BuildResult:
    """Build installable wheels of ``model`` for ``example_inputs``' shapes.

    ``options``: a ``BuildOptions``, or its fields as keywords (``arch``, ``name``, ``out``,
    ``version``, ``dispatch``, ``shapes``, ``cache``, ``jobs``, ``native``, ``weights``: see
    ``BuildOptions.checked``). ``model_file``: the file the model came from, part of the
    trace cache key. ``make_inputs(batch)``: the example inputs at a batch size (default:
    cut or tiled from ``example_inputs``; see ``shapes``)."""
    started = time.perf_counter()
    options = options or BuildOptions.checked(**keywords)
    reporter = reporter or Reporter(quiet=True)
    check_environment()
    cache = Cache.from_options(options.cache, warn=reporter.warning)
    model = model.eval()
    by_batch, shapes = shapes_mod.specialize(model, _tensors(example_inputs), options.shapes, make_inputs, reporter)
    dynamic = shapes if isinstance(shapes, Dynamic) else None

    variants, weights, checked = [], None, set()
    first_of: dict = {}  # a combo's source with its name taken out (and its compile options) -> its label
    copies: dict = {}  # label -> the label of the identical combo compiled
    keys = {b: trace_mod.trace_keys(model, inputs, options.archs, cache, model_file, reporter, dynamic)
            for b, inputs in by_batch.items()}
    steps = [(b, a) for b in by_batch for a in options.archs]
    with tempfile.TemporaryDirectory(prefix="aotcombo-build-") as tmp:
        scheduler = compiler.Scheduler(cache, options.jobs or compiler.default_jobs(), reporter,
                                       triton_cache_dir=str(Path(tmp) / "triton"))
        try:
            for index, (batch, arch) in enumerate(steps):
                where = f"sm_{arch}" if batch is None else f"batch {batch}, sm_{arch}"
                traced = trace_mod.trace(model, by_batch[batch], arch, cache, keys[batch][arch], reporter, where,
                                         dynamic)
                if weights is not None and list(traced.weights) != list(weights):
                    raise UnsupportedModelError(f"{where}: the traced graph takes other weights than batch "
                                                f"{variants[0].batch}'s", fix="build each batch size apart")
                weights = traced.weights
                plan = plan_mod.make_plan(traced.graph, dispatch=options.dispatch)
                reporter.detail(f"{where}: {plan.kernel_launches} kernels -> {len(plan.combos)} combo launches, "
                                f"{plan.extern_calls} extern calls")
                program = codegen.render_program(plan, traced.structure, options.name)
                if program not in checked:
                    check_on_meta(program, traced.graph, f"{options.name}_b{batch}_sm{arch}")
                    checked.add(program)
                pdl = options.pdl and arch >= codegen.PDL_MIN_ARCH
                variant = Variant(arch, batch, plan, program, {c.name: codegen.render_combo(c, pdl=pdl) for c in plan.combos},
                                  trace_cached=traced.cached)
                variants.append(variant)
                for combo in plan.combos:
                    signature, aligned = codegen.combo_signature(combo)
                    label, source = _label(variant, combo.name), variant.sources[combo.name]
                    # A combo identical to one compiled already but for its name (the same layer
                    # again, deeper in the model) takes that one's binary and image.
                    same = (arch, re.sub(rf"\b{combo.name}\b", "COMBO", source), tuple(signature.items()),
                            tuple(aligned), combo.num_warps, combo.num_stages)
                    if same in first_of:
                        copies[label] = first_of[same]
                        continue
                    first_of[same] = label
                    scheduler.add(compiler.Job(label, source, combo.name, tuple(signature.items()), tuple(aligned),
                                               arch, combo.num_warps, combo.num_stages))
                # Workers, if the compiles ahead are worth them: they start while the next
                # shape or arch is traced, and take this one's kernels meanwhile.
                scheduler.plan_pool(archs_left=len(steps) - index - 1)
            with reporter.stage(f"compile {_compile_what(variants, options, scheduler, len(copies))}", timing_key="compile"):
                binaries = scheduler.finish()
                binaries.update({label: binaries[first] for label, first in copies.items()})
        finally:
            scheduler.close()

    for v in variants:
        v.binaries = {c.name: binaries[_label(v, c.name)] for c in v.plan.combos}
    named = {i.key: weights[i.key] for i in variants[0].plan.graph.inputs if i.kind == "weight"}
    weight_tensors = list(named.values())
    with reporter.stage("package wheel", timing_key="package"):
        # --weights external: the model's state_dict comes at load time; tensors outside it
        # (non-persistent buffers, constants the trace lifted) stay in the package
        # (a combined weight is external when all the tensors it is made of are)
        state_dict = model.state_dict()
        external = {name for name in named if all(p in state_dict for p in linears.parts(name) or [name])} \
            if options.weights == "external" else set()
        packaged = [t for name, t in named.items() if name not in external]
        rows = {p: state_dict[p].shape[0] for name in named for p in linears.parts(name) or ()}
        contents = assemble(options.name, options.version, options.archs, shapes, variants, named,
                            save_weights(packaged) if packaged or not external else None,
                            input_names(model, len(example_inputs)), external, rows)
        wheels = write_wheels(options.out, contents, options.native)
    for wheel in wheels:
        reporter.line(f"wrote {wheel}")
    timings = {**reporter.timings, "total": time.perf_counter() - started}
    stats_ = {"enabled": cache.enabled, "dir": str(cache.root) if cache.enabled else None,
              "traces_cached": sum(v.trace_cached for v in variants), "traces": len(variants),
              "kernels_cached": scheduler.cached, "kernels_compiled": scheduler.compiled}
    return BuildResult(wheel=wheels[0], variants=variants, weights=weight_tensors, manifest=contents.manifest,
                       timings=timings, wheels=wheels, cache=stats_)


def _label(variant: Variant, combo: str) -> str:
    """A kernel's compile job: ``sm_90/combo_3`` or ``batch8/sm_90/combo_3``."""
    arch = f"sm_{variant.arch}/{combo}"
    return arch if variant.batch is None else f"batch{variant.batch}/{arch}"


def _compile_what(variants: list[Variant], options: BuildOptions, scheduler, copies: int) -> str:
    total = sum(len(v.plan.combos) for v in variants)
    what = f"{total} kernels for {', '.join(f'sm_{a}' for a in options.archs)}"
    batches = len({v.batch for v in variants})
    if batches > 1:
        what += f" x {batches} batch sizes"
    if copies:
        what += f" ({total - copies} distinct)"
    if scheduler.total < total - copies:
        what += f", {total - copies - scheduler.total} from the build cache"
    return what
