"""Ops the zoo's models call that become kernels through decompositions
(builder/trace/decompositions.py): embedding bags (the DLRM's) and transformers' MoE layers
(grouped_mm_fallback, integer histc), against eager and under Triton's interpreter
(tolerances: ``_zoo_helpers``)."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch import nn
from aotcombo.tools import interpret
from aotcombo.errors import UnsupportedModelError
from aotcombo.builder.pipeline import build_package

from _zoo_helpers import check, load_zoo


# --- embedding bags as kernels (builder/decompositions.py) ------------------------------


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("weighted, last_offset", [(False, False), (True, False), (False, True)])
def test_embedding_bag_decomposition_matches_eager(mode, weighted, last_offset):
    from aotcombo.builder.trace.decompositions import embedding_bag

    if weighted and mode == "mean":
        pytest.skip("per-sample weights need mode='sum'")
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=g)
    ids = torch.randint(0, 50, (11,), generator=g)
    offsets = torch.tensor([0, 0, 3, 3, 7] + ([11] if last_offset else []))  # empty bags first and inside
    per_sample = torch.rand(11, generator=g) if weighted else None
    ref = torch.nn.functional.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=per_sample,
                                            include_last_offset=last_offset)
    got = embedding_bag(weight, ids, offsets, mode=["sum", "mean"].index(mode), per_sample_weights=per_sample,
                        include_last_offset=last_offset)[0]
    assert torch.allclose(got, ref, atol=1e-6)


@pytest.mark.parametrize("starts, n", [([0, 0, 3, 3, 7], 11), ([0, 4, 9, 9], 9), ([0, 2, 12], 9), ([0], 0)])
def test_each_ids_bag_is_counted_as_a_search_would_find_it(starts, n):
    """Empty bags first, inside and at the end (starting at n, or past it), no ids at all;
    no search made."""
    from aotcombo.builder.trace import decompositions

    starts = torch.tensor(starts)
    expected = torch.searchsorted(starts, torch.arange(n), right=True) - 1
    assert torch.equal(decompositions._bag_of_each_id(starts, n), expected)
    with mock.patch.object(torch, "searchsorted", wraps=torch.searchsorted) as search:
        decompositions._bag_of_each_id(starts, n)
        assert not search.called


def test_embedding_bags_become_combo_kernels(tmp_path):
    """The DLRM's 26 EmbeddingBag lookups are no extern calls: the forward is a handful of
    launches, far under Inductor's 40 (checked against eager under the interpreter by
    test_zoo_model_matches_eager[dlrm])."""
    module = load_zoo("dlrm")
    result = build_package(module.get_model(), module.get_example_inputs(), arch=["sm_90"], out=tmp_path, cache=False)
    plan = result.variants[0].plan
    assert not any("embedding_bag" in op.op for op in plan.ops if hasattr(op, "op"))
    assert len(plan.combos) + plan.extern_calls <= 20
    max_bag = torch.nn.EmbeddingBag(10, 4, mode="max")  # max mode stays an extern call

    class Max(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = max_bag

        def forward(self, ids, offsets):
            return self.bag(ids, offsets)

    kept = build_package(Max().eval(), (torch.tensor([1, 2, 3]), torch.tensor([0, 1])), arch=["sm_90"],
                         out=tmp_path / "max", cache=False)
    assert any("embedding_bag" in op.op for op in kept.variants[0].plan.ops if hasattr(op, "op"))


# --- transformers' MoE layers (builder/decompositions.py) -------------------------------


def _tiny_moe(name: str, experts_implementation: str | None = None):
    """A 2-layer MixtralForCausalLM or Qwen2MoeForCausalLM: hidden 64, 4 heads / 2 kv heads,
    4 experts top-2, intermediate 64, vocab 128, fp32; transformers' default experts
    implementation unless one is named."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "use_experts_implementation") and not hasattr(
            transformers.integrations, "use_experts_implementation"):
        pytest.skip("transformers without experts implementations (before 5.x)")
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=128, max_position_embeddings=64, attn_implementation="sdpa",
                  use_cache=False)
    if experts_implementation:
        common["experts_implementation"] = experts_implementation
    torch.manual_seed(0)
    if name == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, **common)).eval()
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
        decoder_sparse_step=1, **common)).eval()


@pytest.mark.parametrize("rows, experts", [(16, 4), (3, 5)])
def test_grouped_mm_fallback_decomposition_matches_transformers(rows, experts):
    """Both formulations (every expert on every row; each row's expert gathered), with an empty
    group and rows past the last group (left zero), against transformers' own op."""
    pytest.importorskip("transformers.integrations.moe")  # registers the op (transformers 5)
    from aotcombo.builder.trace import decompositions

    op = torch.ops.transformers.grouped_mm_fallback.default
    assert op in decompositions.table()
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 8, generator=g), torch.randn(experts, 8, 6, generator=g)
    ends = sorted(torch.randint(0, rows, (experts - 1,), generator=g).tolist())
    ends[0] = ends[1] if experts > 2 else ends[0]  # an empty group
    offs = torch.tensor(ends + [rows - 1], dtype=torch.int32)  # the last row in no group
    got = decompositions.grouped_mm_fallback(x, w, offs)
    assert torch.allclose(got, op(x, w, offs), rtol=1e-6, atol=1e-6)
    assert torch.equal(got[-1], torch.zeros(6))


def test_integer_histc_decomposition_bins_as_cuda_does():
    from aotcombo.builder.trace.decompositions import histc

    x = torch.tensor([0, 3, 3, 1, 7, -1, 8, 2, 5], dtype=torch.int32)
    bins = [((v - 0) * 3 // 7 if v < 7 else 2) for v in x.tolist() if 0 <= v <= 7]  # integer binning, top in last
    expected = torch.bincount(torch.tensor(bins), minlength=3).to(torch.int32)
    got = histc(x, bins=3, min=0, max=7)
    assert got.dtype == torch.int32 and torch.equal(got, expected)
    assert histc(x.float(), bins=3, min=0, max=7) is NotImplemented


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_transformers_moe_builds_with_fixed_shapes_and_matches_eager(name, tmp_path):
    """transformers 5's default experts ("grouped_mm") in fp32 call its custom op
    transformers::grouped_mm_fallback (a loop over offs.tolist()): the package must not call
    it (it needs transformers at run time and syncs with the host), and matches eager."""
    model = _tiny_moe(name)
    g = torch.Generator().manual_seed(0)
    result = build_package(model, (torch.randint(0, 128, (2, 8), generator=g),), arch=["sm_90"],
                           out=tmp_path / "dist", cache=False)
    assert "transformers" not in result.variants[0].program and "histc" not in result.variants[0].program
    assert all(op.startswith("aten::") for op in result.manifest.extern_ops)
    ids = torch.randint(0, 128, (2, 8), generator=g)
    with torch.no_grad():
        ref = model(ids)
    check([interpret.run_variant(result, 0, [ids])["logits"]], [ref.logits])


def test_transformers_eager_experts_error_names_the_line_and_the_fix(tmp_path):
    model = _tiny_moe("mixtral", experts_implementation="eager")
    with pytest.raises(UnsupportedModelError) as info:
        build_package(model, (torch.randint(0, 128, (2, 8)),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "modeling_mixtral.py:" in message and "MixtralExperts" in message
    assert 'set_experts_implementation("grouped_mm")' in message
    assert not (tmp_path / "out").exists()
