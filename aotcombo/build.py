"""The build pipeline: trace -> plan -> codegen -> compile -> package.

``build(model, example_inputs, ...)`` returns the wheel's path. Each stage is
its own module; this one only wires them together, per target arch, and
writes the manifest the runtime reads.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch

from . import __version__
from . import codegen, compiler, plan as plan_mod
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


@dataclass
class BuildResult:
    wheel: Path
    variants: list[Variant]
    weights: list[torch.Tensor]  # in program order
    timings: dict[str, float]

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
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise EnvironmentError_("triton is not installed", fix="pip install 'triton==3.8.*'") from exc


def parse_archs(archs: Sequence[str | int]) -> list[int]:
    parsed = []
    for a in archs:
        try:
            value = a if isinstance(a, int) else compiler.parse_arch(str(a))
        except ValueError as exc:
            raise UsageError(str(exc), fix="pass --arch as a comma-separated list such as sm_80,sm_90") from None
        if value not in compiler.supported_archs():
            known = ", ".join(f"sm_{x}" for x in compiler.supported_archs())
            raise UsageError(f"unknown arch sm_{value}", fix=f"choose among {known}")
        parsed.append(value)
    if not parsed:
        raise UsageError("no arch given", fix="pass --arch sm_80,sm_90")
    return sorted(set(parsed))


def _trace_and_plan(model, inputs, arch, dispatch, name, reporter) -> tuple[Variant, dict, tuple]:
    from . import inductor_bridge

    with reporter.stage(f"trace for sm_{arch}"):
        graph, weights, structure = inductor_bridge.trace(model, inputs, arch)
    plan = plan_mod.make_plan(graph, dispatch=dispatch)
    reporter.detail(
        f"sm_{arch}: {plan.kernel_launches} kernels -> {len(plan.combos)} combo launches, {plan.extern_calls} extern calls"
    )
    sources = {c.name: codegen.render_combo(c) for c in plan.combos}
    program = codegen.render_program(plan, structure, name)
    return Variant(arch, plan, program, sources), weights, structure


def _compile(variant: Variant, workdir: Path, reporter: Reporter, done: list[int], total: int) -> None:
    for combo in variant.plan.combos:
        signature, aligned = codegen.combo_signature(combo)
        variant.binaries[combo.name] = compiler.compile_kernel(
            variant.sources[combo.name], combo.name, signature, aligned, variant.arch, combo.num_warps,
            workdir / f"sm_{variant.arch}",
        )
        done[0] += 1
        reporter.count("compiled kernels", done[0], total)


def _kernel_entries(variant: Variant, image_of) -> list[dict]:
    entries = []
    for combo in variant.plan.combos:
        b = variant.binaries[combo.name]
        entries.append(
            {
                "name": combo.name,
                "image": image_of(combo.name),
                "function": b.name,
                "grid": [combo.grid, 1, 1],
                "num_warps": b.num_warps,
                "shared": b.shared,
                "params": ["ptr"] * len(combo.params),
                "global_scratch": list(b.global_scratch),
                "profile_scratch": list(b.profile_scratch),
                "sub_kernels": [s.kernel.name for s in combo.subs],
                "dispatch": combo.dispatch,
            }
        )
    return entries


def _program_module(text: str) -> str:
    return "program_" + hashlib.sha256(text.encode()).hexdigest()[:12]


def build(
    model: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    *,
    arch: Sequence[str | int] = DEFAULT_ARCHS,
    name: str = "model",
    out: str | Path = "dist",
    dispatch: str = "sequential",
    version: str = "0.1.0",
    reporter: Reporter | None = None,
) -> BuildResult:
    """Build an installable wheel of ``model`` for ``example_inputs``' shapes."""
    from .package import build_wheel, check_name, stage

    reporter = reporter or Reporter(quiet=True)
    check_environment()
    archs = parse_archs(arch)
    check_name(name)
    if dispatch not in plan_mod.DISPATCHES:
        raise UsageError(f"unknown dispatch {dispatch!r}", fix=f"choose among {', '.join(plan_mod.DISPATCHES)}")
    model = model.eval()
    inputs = tuple(example_inputs)

    variants: list[Variant] = []
    weights = structure = None
    for a in archs:
        variant, weights, structure = _trace_and_plan(model, inputs, a, dispatch, name, reporter)
        variants.append(variant)

    total = sum(len(v.plan.combos) for v in variants)
    done = [0]
    with tempfile.TemporaryDirectory(prefix="aotcombo-build-") as tmp:
        tmpdir = Path(tmp)
        with reporter.stage(f"compile {total} kernels for {', '.join(f'sm_{a}' for a in archs)}"):
            for v in variants:
                _compile(v, tmpdir / "kernels", reporter, done, total)

        ptx_variant = variants[0]
        programs: dict[str, str] = {}
        images: dict[str, bytes] = {}
        sources: dict[str, str] = {}
        manifest_variants = {}
        for v in variants:
            module = _program_module(v.program)
            programs[module] = v.program
            key = f"sm_{v.arch}"
            for c in v.plan.combos:
                images[f"kernels/{key}/{c.name}.cubin"] = v.binaries[c.name].cubin
                sources[f"kernels/{key}/{c.name}.py"] = v.sources[c.name]
            manifest_variants[key] = {
                "program": module,
                "kernels": _kernel_entries(v, lambda n, key=key: f"kernels/{key}/{n}.cubin"),
            }
        for c in ptx_variant.plan.combos:
            images[f"kernels/ptx/{c.name}.ptx"] = ptx_variant.binaries[c.name].ptx.encode()
        manifest_variants["ptx"] = {
            "program": _program_module(ptx_variant.program),
            "kernels": _kernel_entries(ptx_variant, lambda n: f"kernels/ptx/{n}.ptx"),
        }
        graph = ptx_variant.plan.graph
        user_inputs = sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)
        manifest = {
            "format": 1,
            "name": name,
            "version": version,
            "versions": {"aotcombo": __version__, "torch": torch.__version__, "triton": _triton_version()},
            "archs": archs,
            "ptx_arch": ptx_variant.arch,
            "inputs": [
                {
                    "name": i.name,
                    "shape": list(i.spec.shape),
                    "stride": list(i.spec.stride),
                    "dtype": i.spec.dtype,
                    "align": 16,
                }
                for i in user_inputs
            ],
            "weights": "weights.pt",
            "extern_ops": sorted({op.op for v in variants for op in v.plan.ops if hasattr(op, "op")}),
            "stats": {
                "kernels": ptx_variant.plan.kernel_launches,
                "combos": len(ptx_variant.plan.combos),
                "extern_calls": ptx_variant.plan.extern_calls,
            },
            "variants": manifest_variants,
        }
        weight_tensors = [weights[i.key] for i in graph.inputs if i.kind == "weight"]
        with reporter.stage("package wheel"):
            project = stage(tmpdir / "project", name, manifest, programs, images, sources, weight_tensors)
            wheel = build_wheel(project, Path(out))
    reporter.line(f"wrote {wheel}")
    return BuildResult(wheel=wheel, variants=variants, weights=weight_tensors, timings=dict(reporter.timings))


def _triton_version() -> str:
    import triton

    return triton.__version__
