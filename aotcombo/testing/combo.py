"""Build a case of ``combo_test_models`` (``corpora.combo_test_models()``), count its launches
against Inductor's own combo kernels, and check it against eager under Triton's interpreter.
Shared by
``tests/models/test_combo_tests.py``, ``tests/gpu/test_gpu_combo_tests.py`` and the scripts
``build_combo_tests.py`` and ``combo_tests_table.py``.

Launches per forward: combo launches + extern calls for aotcombo (``BuildResult.summary()``),
kernel launches + extern calls of the program Inductor makes with ``combo_kernels=True``
(``trace_entry.trace_model(..., inductor_combo_kernels=True)``: what
``torch.compile(options={"combo_kernels": True})`` runs, with Inductor's other defaults),
both traced in this process for sm_90 on the same model and inputs (with a dynamic batch:
the same batched inputs and range).

A ``case`` below is a ``combo_test_models.Case``: the corpus is user code, loaded by path
(``corpora``), so it is not imported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils import _pytree

from .compare import relative_error

# The builder is imported where it is used: the GPU test (tests/gpu/test_gpu_combo_tests.py) uses
# the helpers below on a machine whose torch the builder does not support.

# Relative L2 error (compare.relative_error) allowed per output dtype; integer and bool outputs
# must be exact.
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}
CHECK_SEEDS = (11, 12)  # fresh inputs for the interpreter (builds use seed 0, or shapes only)


@dataclass
class Measured:
    uncombined: int  # Inductor's kernels one launch each, + extern calls
    ours: int  # aotcombo launches per forward
    inductor: int  # Inductor combo-kernel launches per forward
    errors: dict = field(default_factory=dict)  # (dispatch, seed or batch) -> worst relative error


def inductor_launches(model, inputs, dynamic=None) -> int:
    from aotcombo.builder import graph as g
    from aotcombo.builder.trace import entry as trace_entry

    graph, _, _ = trace_entry.trace_model(model, inputs, 90, inductor_combo_kernels=True, dynamic=dynamic)
    return sum(isinstance(op, (g.Launch, g.Extern)) for op in graph.ops)


# Cases whose package at the PyTorch test's size does not travel to the GPU machine (64 MiB a
# transfer): the GPU check builds and runs their interpreter-sized variant (``small``), as the
# interpreter check does.
GPU_SMALL = {"wide_resnet"}  # wide_resnet50_2-like at 224x224: a 365 MB wheel; (1, 1, 2) blocks at 64x64: 53 MB


def package_name(case: str) -> str:
    """The package a case is built as for the GPU check (``scripts/build_combo_tests.py``)."""
    return f"combo_{case}"


def build(case, out: Path, *, small: bool = False, dispatch: str = "sequential", cache=False,
          name: str = "case"):
    """Build ``case`` for sm_90 (``small``: its interpreter-sized variant)."""
    from aotcombo.builder.pipeline import build_package
    from aotcombo.runtime.manifest import Dynamic

    model = (case.small_model or case.model)() if small else case.model()
    model = model.eval()
    if case.dynamic:
        def make(b):
            return case.inputs(0, b)

        return model, build_package(model, make(_traced_batch(case)), arch=["sm_90"], name=name, out=out,
                                    dispatch=dispatch, jobs=1, cache=cache, shapes=Dynamic(*case.dynamic),
                                    make_inputs=make)
    inputs = case.small(0) if small else case.inputs(None if case.small else 0)
    return model, build_package(model, inputs, arch=["sm_90"], name=name, out=out, dispatch=dispatch, jobs=1,
                                cache=cache)


def _traced_batch(case) -> int:
    low, high = case.dynamic
    return min(max(2, low), high - 1)  # where the pipeline traces a dynamic batch


def count(case, model, result) -> tuple[int, int, int]:
    """Launches per forward of a build of ``case``: (uncombined: Inductor's kernels one launch
    each + extern calls, aotcombo's, Inductor's combo kernels')."""
    summary = result.summary()
    graph = result.variants[0].plan.graph
    if case.dynamic:
        inputs = case.inputs(0, _traced_batch(case))
        theirs = inductor_launches(model, inputs, graph.dynamic)
    else:
        theirs = inductor_launches(model, case.inputs(None if case.small else 0))
    return summary["kernels"] + summary["extern_calls"], summary["launches_per_forward"], theirs


def worst_error(got, ref) -> float:
    """The worst relative L2 error over the outputs, after checking structure, shapes,
    dtypes and strides; raises AssertionError on any mismatch, an inexact integer output or
    an error over ``TOLERANCE``."""
    got_leaves, got_spec = _pytree.tree_flatten(got)
    ref_leaves, ref_spec = _pytree.tree_flatten(ref)
    assert got_spec == ref_spec, (got_spec, ref_spec)
    worst = 0.0
    for i, (a, b) in enumerate(zip(got_leaves, ref_leaves)):
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        assert a.stride() == b.stride(), (i, a.stride(), b.stride())
        if not b.is_floating_point():
            assert torch.equal(a, b), f"output {i}: integer output differs from eager"
            continue
        err = relative_error(a, b)
        assert err <= TOLERANCE[b.dtype], f"output {i}: relative error {err:.3g} > {TOLERANCE[b.dtype]}"
        worst = max(worst, err)
    return worst


def check(case, model, result, inputs) -> float:
    """Run the build under the interpreter on ``inputs``, compare with eager (outputs and
    inputs the model updates in place); the worst relative error."""
    from aotcombo.tools import interpret

    mine = [clone_exact(t) for t in inputs]
    eager_inputs = [clone_exact(t) for t in inputs]
    with torch.no_grad():
        ref = model(*eager_inputs)
    got = interpret.run_variant(result, 0, mine)
    # In-place updates reach the caller's tensors, as in eager (same tolerances as outputs).
    return max(worst_error(got, ref), worst_error(tuple(mine), tuple(eager_inputs)))


def clone_exact(t: torch.Tensor, device=None) -> torch.Tensor:
    """A copy (on ``device``, default ``t``'s) with the same storage size, offset and strides
    (``clone()`` makes a view with gaps, such as ``x[:8, :8]``, contiguous: not the layout the
    package was built for)."""
    storage = t.untyped_storage()
    storage = storage.clone() if device is None else storage.to(device=device)
    return torch.empty(0, dtype=t.dtype, device=storage.device).set_(storage, t.storage_offset(), t.size(), t.stride())


def check_inputs(case, seed: int, batch: int | None = None) -> tuple:
    if case.dynamic:
        return case.inputs(seed, batch)
    return (case.small or case.inputs)(seed)


def fresh_inputs_differ(case) -> bool:
    """The check seeds draw different, nonzero data (so the check is not vacuous)."""
    a, b = (check_inputs(case, s, max(case.check_batches) if case.dynamic else None) for s in CHECK_SEEDS)
    for x, y in zip(a, b):
        if x.numel() > 1 and (torch.equal(x, y) or not bool((x != 0).any())):
            return False
    return True

