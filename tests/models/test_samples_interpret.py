"""Every sample model, built for sm_80 and sm_90, computes what eager computes.

The generated combo kernels run under Triton's interpreter on the CPU (the
same sources that were compiled to cubins for the wheel), the extern calls
through torch's CPU kernels; shapes are reduced so the interpreter stays fast.
"""

import importlib.util
from pathlib import Path

import pytest
import torch
from torch.utils import _pytree

from aotcombo.tools import interpret
from aotcombo.builder.pipeline import build_package as build
from aotcombo.testing.compare import relative_error

ROOT = Path(__file__).resolve().parents[2]

SMALL = {
    "branches": dict(n_branches=6, rows=16, base=64, step=32),
    "transformer_block": dict(batch=2, seq=32, d_model=96, n_heads=4),
    "adam_step": dict(n_tensors=8, min_numel=100, max_numel=5000),
    "conv_block": dict(batch=2, channels=8, size=12),
}
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def load_sample(name):
    spec = importlib.util.spec_from_file_location(f"sample_{name}", ROOT / "sample_models" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fresh(t: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if bool((t >= 0).all()):
        return (torch.rand(t.shape, generator=g) * float(t.max()) + 1e-3).to(t.dtype)
    return (torch.randn(t.shape, generator=g) * float(t.float().std())).to(t.dtype)


@pytest.fixture(scope="module", params=sorted(SMALL))
def built(request, tmp_path_factory):
    name = request.param
    module = load_sample(name)
    model = module.get_model(**SMALL[name]).eval()
    inputs = module.get_example_inputs(**SMALL[name])
    result = build(model, inputs, arch=["sm_80", "sm_90"], name=name, out=tmp_path_factory.mktemp(name))
    return name, model, inputs, result


def test_every_combo_compiled_for_both_archs(built):
    name, _, _, result = built
    assert [v.arch for v in result.variants] == [80, 90]
    for variant in result.variants:
        assert set(variant.binaries) == {c.name for c in variant.plan.combos}
        for binary in variant.binaries.values():
            assert binary.cubin[:4] == b"\x7fELF"
            assert f".target sm_{variant.arch}" in binary.ptx


def test_combos_are_fewer_than_kernels(built):
    name, _, _, result = built
    plan = result.variants[0].plan
    assert len(plan.call_combos) <= plan.kernel_launches
    if name in ("branches", "adam_step"):
        assert len(plan.call_combos) < plan.kernel_launches


@pytest.mark.parametrize("variant", [0, 1])
def test_interpreted_package_matches_eager(built, variant):
    name, model, example, result = built
    inputs = [fresh(t, seed=i + 100) for i, t in enumerate(example)]
    with torch.no_grad():
        ref = model(*inputs)
    got = interpret.run_variant(result, variant, inputs)
    got_leaves, got_spec = _pytree.tree_flatten(got)
    ref_leaves, ref_spec = _pytree.tree_flatten(ref)
    assert got_spec == ref_spec
    for g, r in zip(got_leaves, ref_leaves):
        assert g.shape == r.shape and g.dtype == r.dtype
        assert relative_error(g, r) <= TOLERANCE[r.dtype], f"{name}: {relative_error(g, r):.2e}"
