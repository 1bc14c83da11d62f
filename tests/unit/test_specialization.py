"""A program for dynamic axes assumes nothing of their sizes that their ranges do not hold: a
guard added after export (a size compared with ``==`` on the example's value) is a build error
naming it, where it was added and a size it would be wrong at, not a package that is silently
wrong there. And the linear rewrite compares sizes without adding guards (a MoE whose example
has as many tokens as its hidden size once assumed the two equal)."""

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StrictMinMaxConstraint
from torch.utils._sympy.value_ranges import ValueRanges

from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import specialization
from aotcombo.errors import UnsupportedModelError
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import leaves, relative_error
from aotcombo.tools import interpret


def _tokens(env: ShapeEnv, low: int = 2, high: int = 64, example: int = 32):
    symbol = env.create_symbol(example, source=ConstantSource("tokens"), dynamic_dim=DimDynamic.DYNAMIC,
                               constraint_dim=StrictMinMaxConstraint(vr=ValueRanges(low, high), warn_only=False))
    return env.create_symintnode(symbol, hint=example)


def test_guards_the_ranges_imply_pass():
    env = ShapeEnv()
    tokens = _tokens(env)
    since = specialization.baseline(env)
    assert tokens >= 2 and tokens * 4 <= 256
    specialization.refuse_new_guards(env, since)


def test_a_size_assumed_from_the_example_is_refused():
    env = ShapeEnv()
    tokens = _tokens(env)
    since = specialization.baseline(env)
    assert tokens == 32  # what a rewrite comparing sizes with == assumes, as a guard
    with pytest.raises(UnsupportedModelError, match=r"assumed Eq\(s\d+, 32\) at test_specialization\.py:\d+ in "
                                                    r"test_a_size_assumed_from_the_example_is_refused, which sizes "
                                                    r"in the --dynamic ranges break \(tokens = 2\)"):
        specialization.refuse_new_guards(env, since)


def test_a_moe_whose_example_has_as_many_tokens_as_features_builds_for_every_size(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen2MoeConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=32, use_cache=False)
    torch.manual_seed(0)
    model = transformers.Qwen2MoeModel(config).eval()
    example = (torch.randint(0, 100, (2, 16)), torch.ones(2, 16, dtype=torch.int64))  # 32 tokens, 32 features
    axes = {name: {0: "batch", 1: "seq"} for name in ("input_ids", "attention_mask")}
    result = build_package(model, example, arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                           shapes=Dynamic(batch=(1, 4), seq=(1, 32)), dynamic_axes=axes)
    for batch, seq in ((1, 5), (3, 7)):  # the program for a few tokens, and the one for every size
        ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
        inputs = (ids, torch.ones(batch, seq, dtype=torch.int64))
        with torch.no_grad():
            ref = leaves(dict(model(*inputs)))
        variants = [i for i, v in enumerate(result.variants) if v.max_tokens is None or batch * seq <= v.max_tokens]
        for variant in variants:
            got = leaves(interpret.run_variant(result, variant, inputs))
            assert relative_error(got[0], ref[0]) <= 1e-4
