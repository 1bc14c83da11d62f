"""Coverage: every construct in tests/models/coverage_models.py builds and matches eager
under Triton's interpreter, in both dispatch orders; unsupported ones fail the build with a clear
error. The round-robin checks of the constructs in ``SLOW_ROUND_ROBIN`` (reductions whose kernels
take 25-95 s each under the interpreter on 2 cores; their sequential checks stay) are ``slow``."""

import pytest
import torch
from torch.utils import _pytree

from aotcombo.tools import interpret
from aotcombo.builder.pipeline import build_package as build
from aotcombo.errors import UnsupportedModelError
from aotcombo.testing.compare import relative_error
from aotcombo.testing.corpora import coverage_models as _coverage_models

coverage_models = _coverage_models()

SLOW_ROUND_ROBIN = {"split_reduction", "mixed_order_reduction", "looped_inner_reduction", "reductions"}
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def fresh(t, seed):
    g = torch.Generator().manual_seed(seed)
    if not t.is_floating_point():
        return t.clone()
    if t.dim() and bool((t > 0).all()):
        return (torch.rand(t.shape, generator=g) + 0.5).to(t.dtype)
    return torch.randn(t.shape, generator=g).to(t.dtype)


def cuda_strides(name, example):
    """The output strides eager has on a GPU where they differ from eager on the CPU:
    CUDA's memory-efficient attention returns [batch, seq, heads, dim] memory (its meta
    kernel says so; runtime/ops.py returns that layout), the CPU kernel a contiguous
    [batch, heads, seq, dim] tensor."""
    if name == "attention_fp32_mask":
        q, k, v, mask = (t.to("meta") for t in example)
        return [torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, mask, False)[0].stride()]
    return None


def check(got, ref, strides=None):
    got_leaves, got_spec = _pytree.tree_flatten(got)
    ref_leaves, ref_spec = _pytree.tree_flatten(ref)
    assert got_spec == ref_spec
    for i, (g, r) in enumerate(zip(got_leaves, ref_leaves)):
        stride = strides[i] if strides else r.stride()
        assert g.shape == r.shape and g.dtype == r.dtype and g.stride() == stride, (
            g.shape, r.shape, g.stride(), stride)
        if not r.is_floating_point():
            assert torch.equal(g, r)
        else:
            err = relative_error(g, r)
            assert err <= TOLERANCE[r.dtype], err


def _construct_params():
    for dispatch in ("sequential", "round_robin"):
        for name in sorted(coverage_models.SUPPORTED):
            slow = dispatch == "round_robin" and name in SLOW_ROUND_ROBIN
            yield pytest.param(name, dispatch, marks=[pytest.mark.slow] if slow else [], id=f"{dispatch}-{name}")


@pytest.mark.parametrize("name, dispatch", list(_construct_params()))
def test_construct_matches_eager(name, dispatch, tmp_path):
    model, example = coverage_models.SUPPORTED[name]()
    model = model.eval()
    result = build(model, example, arch=["sm_90"], name="cov", out=tmp_path, dispatch=dispatch)
    inputs = [fresh(t, 7 + i) for i, t in enumerate(example)]
    eager_inputs = [t.clone() for t in inputs]
    with torch.no_grad():
        ref = model(*eager_inputs)
    got = interpret.run_variant(result, 0, inputs)
    check(got, ref, cuda_strides(name, example))
    for mine, theirs in zip(inputs, eager_inputs):  # input mutation lands in the caller's tensors
        assert torch.equal(mine, theirs)


def test_random_ops_draw_fresh_numbers(tmp_path):
    model, example = coverage_models.random_ops()
    result = build(model, example, arch=["sm_90"], name="cov", out=tmp_path)
    x = fresh(example[0], 3)
    first = interpret.run_variant(result, 0, [x])
    second = interpret.run_variant(result, 0, [x])
    uniform, normal, kept = first
    assert torch.equal(kept, x)  # dropout with training=False is the identity
    assert 0 <= float((uniform - x).min()) and float((uniform - x).max()) < 1
    assert abs(float((uniform - x).mean()) - 0.5) < 0.05
    assert abs(float(normal.mean())) < 0.1 and abs(float(normal.std()) - 1) < 0.1
    assert not torch.equal(first[1], second[1])  # each call draws new numbers


@pytest.mark.parametrize("name", sorted(coverage_models.UNSUPPORTED))
def test_unsupported_construct_fails_clearly(name, tmp_path):
    model, example = coverage_models.UNSUPPORTED[name]()
    with pytest.raises(UnsupportedModelError) as info:
        build(model, example, arch=["sm_90"], name="cov", out=tmp_path / "out")
    assert "coverage_models.py" in str(info.value)
    assert not (tmp_path / "out").exists()
