"""A mask the model computes from the ids, at any length. transformers builds a decoder's causal
mask (with no mask input) as a [batch, 1, seq, seq] tensor, which torch's memory-efficient
attention reads in rows padded to 8 elements. Inductor compared the mask's strides with the
padded ones, a guard on the length (``Eq(8*s*ceil(s/8), s**2)``): the 2026-12-05 dynamic sweep
found GPT-J, GPT-BigCode, Qwen3-MoE and Llama for sequence classification refused
(``trace/layout_guards.padded_attention_masks`` copies such a mask into padded rows first). A
two-layer GPT-J builds for lengths 1-32 and matches float32 eager under the interpreter (relative
L2 1e-4) at lengths that are and are not multiples of 8; its two layers read one padded copy."""

import torch
import transformers

from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import leaves, relative_error
from aotcombo.tools import interpret


def test_a_causal_mask_made_from_the_ids_builds_for_every_length(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPTJConfig(vocab_size=100, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64,
                                     use_cache=False, bos_token_id=0, eos_token_id=0)
    model = transformers.GPTJModel(config).eval()
    result = build_package(model, (torch.randint(0, 100, (2, 16)),), arch=["sm_90"], out=tmp_path, cache=False,
                           jobs=1, shapes=Dynamic(batch=(1, 4), seq=(1, 32)),
                           dynamic_axes={"input_ids": {0: "batch", 1: "seq"}})
    copies = [s.kernel.source.count("tl.store") for c in result.variants[0].plan.combos for s in c.subs
              if "efficient_attention" in s.kernel.name]
    assert sum(copies) == 1, copies  # the mask's padded copy, written once for both layers
    for batch, seq in ((1, 1), (2, 7), (3, 29), (4, 32)):
        ids = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seq))
        with torch.no_grad():
            want = leaves(model(ids))[0]
        got = leaves(interpret.run_variant(result, 0, (ids,)))[0]
        assert relative_error(got, want) <= 1e-4, (batch, seq)
