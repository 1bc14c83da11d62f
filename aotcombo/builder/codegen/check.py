"""Check a rendered program before it is packaged: run it on the meta device.

A program is straight-line calls of torch ops (and of ``runtime/ops.py``) between kernel
launches. Run with meta tensors for its inputs and weights and no-op kernels, every extern
call goes through this torch's dispatcher and shape/dtype checks, so an argument that an op
would refuse on the GPU (a dtype, a rank, a missing overload) fails the build here, naming
the op and the model's program line, instead of failing at a user's first call. Kernels only
write into buffers allocated before them, so skipping them leaves every shape as it is.

``load_program`` is also how ``aotcombo.tools.interpret`` loads a program: as a module of a
stand-in package whose ``_runtime`` is ``aotcombo.runtime``, as in a wheel.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import linecache
import sys
import traceback
import types

import torch

from ...errors import UnsupportedModelError
from ...runtime.inputs import at_sizes
from ...runtime.manifest import GROUP
from ..trace.collectives import group_name
from .. import graph as g

PACKAGE = "aotcombo_program"  # the stand-in package a program is a module of


def load_program(source: str, label: str) -> types.ModuleType:
    """``source`` as module ``aotcombo_program.<label>``, its file virtual (``<aotcombo:label>``)."""
    if PACKAGE not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = []
        sys.modules[PACKAGE] = package
        sys.modules[f"{PACKAGE}._runtime"] = importlib.import_module("aotcombo.runtime")
    name = f"{PACKAGE}.{label}"
    filename = f"<aotcombo:{label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name)
    module.__file__, module.__package__ = filename, PACKAGE
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def _meta(spec: g.TensorSpec, sizes: dict | None) -> torch.Tensor:
    return torch.empty_strided(at_sizes(spec.shape, sizes), at_sizes(spec.stride, sizes),
                               dtype=getattr(torch, spec.dtype), device="meta")


def check_on_meta(program: str, graph: g.Graph, label: str) -> None:
    """Run ``program`` on meta tensors; an extern call that fails is an UnsupportedModelError
    naming the op, its program line and this torch's message."""
    sizes = {a.name: max(2, a.min) for a in graph.dynamic.axes} if graph.dynamic is not None else None
    weights = [_meta(i.spec, sizes) for i in graph.inputs if i.kind == "weight"]
    inputs = [_meta(i.spec, sizes) for i in sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)]
    module = load_program(program, label)
    forward = module.forward
    if any(g.is_collective(op) for op in graph.ops):
        forward = functools.partial(forward, **{GROUP: group_name()})  # the trace's process group

    class NoKernels:
        def __getitem__(self, index):
            return lambda *args: None

    try:
        with torch.no_grad():
            if hasattr(module, "prepare"):  # the work on the weights alone, at load
                weights = module.prepare(NoKernels(), weights, torch.device("meta"))
            forward(NoKernels(), weights, torch.device("meta"), *inputs)
    except Exception as exc:  # noqa: BLE001 - any failure is one a GPU would meet too
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == f"<aotcombo:{label}>"]
        line = (frames[-1].line or "").strip() if frames else "?"
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UnsupportedModelError(
            f"the compiled program fails on torch {torch.__version__}'s meta tensors at `{line}`: "
            f"{type(exc).__name__}: {first}",
            fix="this is a bug in aotcombo or torch for this model: report it with the model; "
            "rebuilding with another --dynamic/--batch setting may avoid the op",
        ) from exc
