"""A program for dynamic axes assumes nothing of their sizes that their ranges do not hold: the
linear rewrite compares sizes without adding guards (a MoE whose example has as many tokens as
its hidden size once assumed the two equal)."""

import pytest
import torch

from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import leaves, relative_error
from aotcombo.tools import interpret


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
