"""The model zoo (sample_models/zoo/) and the Inductor constructs it found.

* Zoo models build and their interpreted programs match eager on fresh random
  inputs: a fast subset here; the heavier ones are marked ``slow``.
* Mixed-order reductions (one tensor reduced along both dims: Inductor fuses them
  into one kernel leaving partial results in a workspace, then reduces those in
  its wrapper as text) build and match eager under Triton's interpreter.
* A build that Inductor fails names the op and the model's line (in this file), never an
  empty "op named above".

The other constructs it found: attention (test_zoo_attention), what models take and give
(test_zoo_model_io), embedding bags and MoE layers (test_zoo_decompositions). Tolerances:
``_zoo_helpers``.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch import nn
from torch.utils import _pytree
from aotcombo.builder.trace import diagnosis as trace_diagnosis
from aotcombo.builder.trace import wrapper_text as trace_wrapper_text
from aotcombo.tools import interpret
from aotcombo.errors import UnsupportedModelError
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing import zoo
from aotcombo.testing.compare import relative_error

from _zoo_helpers import NEEDS, check, load_zoo


# --- the zoo ------------------------------------------------------------------------


# Built and run under the interpreter in the default test run: about 15 s each on 2 cores.
FAST = ("llama_block", "moe", "dlrm", "bert", "diffusers_vae_decoder")
WHEEL_BUDGET = 25 * 2**20  # bytes per wheel (sm_90 only); the whole zoo fits about 100 MB


def test_every_zoo_file_is_listed():
    assert sorted(zoo.ZOO) == sorted(NEEDS)  # model files; _weights.py is a helper they import


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_zoo_file_format(name):
    """get_model(): an eval-mode module on the CPU, the same weights every call;
    get_example_inputs(): a tuple of CPU tensors, other values for another seed."""
    module = load_zoo(name)
    model, again = module.get_model(), module.get_model()
    assert isinstance(model, nn.Module) and not model.training
    state, state_again = model.state_dict(), again.state_dict()
    assert all(t.device.type == "cpu" and torch.equal(t, state_again[k]) for k, t in state.items())
    inputs = module.get_example_inputs()
    assert isinstance(inputs, tuple) and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)
    other = module.get_example_inputs(seed=1)
    assert any(not torch.equal(a, b) for a, b in zip(inputs, other))


def _upcast(model):
    import copy

    return copy.deepcopy(model).float()


def check_zoo_model(name: str, tmp_path) -> dict:
    """Build ``name`` for sm_90 and run it under the interpreter on fresh inputs (seed 1;
    the build traced seed 0's). fp32 models: rel. L2 to eager <= 1e-4. bf16/fp16 models:
    the reference is the model in fp32 on the same inputs, and the package may be no
    farther from it than 1.5x eager's own error in the low precision (or 1e-2)."""
    module = load_zoo(name)
    model = module.get_model()
    result = build_package(model, module.get_example_inputs(), arch=["sm_90"], name=name, out=tmp_path / "dist",
                           cache=tmp_path / "cache")
    assert result.wheel.stat().st_size <= WHEEL_BUDGET
    inputs = module.get_example_inputs(seed=1)
    with torch.no_grad():
        ref = model(*inputs)
    got = interpret.run_variant(result, 0, [t.clone() for t in inputs])
    low = {p.dtype for p in model.parameters()} & {torch.bfloat16, torch.float16}
    if not low:
        return {"errors": check(got, ref), "result": result}
    with torch.no_grad():
        exact = _upcast(model)(*[t.float() if t.is_floating_point() else t for t in inputs])
    errors = []
    for g, r, e in zip(_pytree.tree_leaves(got), _pytree.tree_leaves(ref), _pytree.tree_leaves(exact)):
        assert g.shape == r.shape and g.dtype == r.dtype
        if not r.is_floating_point():
            assert torch.equal(g, r)
            continue
        eager_error = relative_error(r, e)
        assert eager_error < 0.1, f"eager in {r.dtype} is {eager_error:.2e} off fp32: no meaningful reference"
        err = relative_error(g, e)
        assert err <= max(1e-2, 1.5 * eager_error), (err, eager_error)
        errors.append(err)
    return {"errors": errors, "result": result}


@pytest.mark.parametrize("name", FAST)
def test_zoo_model_matches_eager(name, tmp_path):
    check_zoo_model(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(NEEDS) - set(FAST)))
def test_zoo_model_matches_eager_slow(name, tmp_path):
    check_zoo_model(name, tmp_path)


# --- mixed-order reductions ---------------------------------------------------------


def mixed_order_kernels(result) -> list:
    return [k for k in result.variants[0].plan.graph.kernels if k.rsplit_size]


class BothOrders(nn.Module):
    """Each input reduced along both dims (sum/sum and prod/sum), as in PyTorch's
    test_combo_kernels.py."""

    def forward(self, a, b):
        return a.sum(0), a.sum(1), b.prod(0), (b * 2).sum(1)


def _both_orders_inputs(seed, dtype=torch.float32, rows=(512, 256), cols=(64, 32)):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows[0], cols[0], generator=g).to(dtype)
    b = (1 + 0.01 * torch.randn(rows[1], cols[1], generator=g)).to(dtype)  # a product of 256 values stays finite
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mixed_order_reduction_matches_eager(dtype, tmp_path):
    """Small tensors (Inductor's size thresholds lifted with its non-strict mode) so
    the interpreter is fast; bf16 also checks the final cast the wrapper adds."""
    from torch._inductor import config

    model = BothOrders()
    with config.patch({"triton.mix_order_reduction_non_strict_mode": True}):
        result = build_package(model, _both_orders_inputs(0, dtype), arch=["sm_90"], out=tmp_path, cache=False)
    assert len(mixed_order_kernels(result)) == 2  # a sum/sum and a prod/sum pair
    program = result.variants[0].program
    assert "aten.sum.dim_IntList(" in program and "aten.prod.dim_int(" in program
    inputs = _both_orders_inputs(1, dtype)
    # The kernel accumulates in fp32, as Inductor does; eager's bf16 prod of 256 values
    # rounds at every step (10% off the exact product), so the reference is eager in fp32
    # on the same bf16 inputs, rounded to the output dtype.
    ref = [r.to(dtype) for r in model(*[x.float() for x in inputs])]
    check(list(interpret.run_variant(result, 0, list(inputs))), ref)


def _pytorch_case():
    """PyTorch's own case: an 8192x1024 fp32 tensor summed along both dims."""

    class Sums(nn.Module):
        def forward(self, a):
            return a.sum(0), a.sum(1)

    return Sums(), lambda seed: (torch.randn(8192, 1024, generator=torch.Generator().manual_seed(seed)),)


def test_mixed_order_reduction_builds_at_default_thresholds(tmp_path):
    model, inputs = _pytorch_case()
    result = build_package(model, inputs(0), arch=["sm_90"], out=tmp_path, cache=False)
    [kernel] = mixed_order_kernels(result)
    assert result.summary()["launches_per_forward"] == 2  # the fused kernel, then the sum of its partials
    # The workspace holds one partial row per split: its size follows RSPLIT_SIZE.
    splits = -(-8192 // kernel.rsplit_size)
    assert f"empty_strided(({splits * 1024},)" in result.variants[0].program


@pytest.mark.slow
def test_mixed_order_reduction_at_default_thresholds_matches_eager(tmp_path):
    model, inputs = _pytorch_case()
    result = build_package(model, inputs(0), arch=["sm_90"], out=tmp_path, cache=False)
    assert mixed_order_kernels(result)
    x = inputs(1)
    check(interpret.run_variant(result, 0, list(x)), model(*x))


def test_mixed_order_reduction_with_a_dynamic_batch_reduces_each_order_apart(tmp_path):
    """A split fixed at build time cannot follow a run-time batch: Inductor's mixed-order
    fusion is off for --dynamic builds, and the build still succeeds."""
    model, inputs = _pytorch_case()
    result = build_package(model, inputs(0), arch=["sm_90"], out=tmp_path, cache=False, shapes=Dynamic(4096, 16384))
    assert not mixed_order_kernels(result)
    assert "workspace" not in result.variants[0].program


# --- build errors name the op and the line -----------------------------------------


class SinModel(nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.sin(y) + 1  # the line the error must name


def test_inductor_lowering_failure_names_the_op_and_the_line(tmp_path):
    import torch._inductor.lowering as lowering

    def broken(*args, **kwargs):
        raise NotImplementedError("\n   ")  # an empty message, as some Inductor errors have

    with mock.patch.dict(lowering.lowerings, {torch.ops.aten.sin.default: broken}):
        with pytest.raises(UnsupportedModelError) as info:
            build_package(SinModel(), (torch.randn(8),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "aten.sin.default" in message
    assert "test_zoo.py:" in message and "torch.sin(y)" in message
    assert "named above" not in message
    assert not (tmp_path / "out").exists()


def test_unknown_wrapper_text_line_is_named():
    """A text line the FX converter cannot read fails with the line itself, not with
    Inductor's NotImplementedError."""
    with pytest.raises(UnsupportedModelError) as info:
        trace_wrapper_text.structured_lines(["buf3 = some_new_wrapper_step(buf1)"])
    assert "`buf3 = some_new_wrapper_step(buf1)`" in str(info.value)


def test_error_summary_is_never_empty():
    wrapped = NotImplementedError("\nFound line of unrecognized type '<class 'str'>':\n    'x = y'\n")
    assert trace_diagnosis.summary(wrapped) == "NotImplementedError: Found line of unrecognized type '<class 'str'>':"
    assert trace_diagnosis.summary(RuntimeError("")) == "RuntimeError: (no message)"
    assert trace_diagnosis.summary(RuntimeError("NotImplementedError: ")) == "RuntimeError: NotImplementedError:"


class AttentionDropout(nn.Module):
    def forward(self, q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1)  # the line to name


def test_attention_dropout_error_names_the_line(tmp_path):
    with pytest.raises(UnsupportedModelError) as info:
        build_package(AttentionDropout(), (torch.randn(1, 2, 8, 8),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "dropout_p" in message and "test_zoo.py:" in message and "dropout_p=0.1)" in message
