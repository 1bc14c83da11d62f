"""One package for an LLM's prompts of any length and the decode steps after them: transformers'
Llama over its ``StaticCache`` (sample_models/llama_static_cache.py, fp32) built once with
``--dynamic seq=1:64`` over ``input_ids`` [1, seq] and ``cache_position`` [seq]. Under the
interpreter, prompts of 1, 5 and 17 tokens, each followed by four greedy decode steps
through the same package, give eager's logits at every step (relative L2 ≤ 1e-4, fp32) and
leave the same cache."""

import pytest
import torch

from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.testing.paths import sample_model
from aotcombo.tools import interpret

STEPS = 4


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    source = sample_model("llama_static_cache")
    model = source.get_model()
    result = build_package(model, source.get_prompt_inputs(), arch=["sm_90"], name="llama_prompt",
                           out=tmp_path_factory.mktemp("prompt"), cache=False, jobs=1,
                           shapes=Dynamic(seq=(1, source.MAX_CACHE)), dynamic_axes=source.get_dynamic_axes())
    return source, result, [w.clone() for w in result.weights]


@pytest.mark.parametrize("length", [1, 5, 17])
def test_prompt_then_decode_steps_match_eager(built, length):
    source, result, initial = built
    for weight, value in zip(result.weights, initial):  # an empty cache for each prompt
        weight.copy_(value)
    eager = source.get_model()
    ids, positions = source.get_prompt_inputs(length, seed=length)
    for step in range(STEPS + 1):
        with torch.no_grad():
            ref = eager(ids, positions)
        got = interpret.run_variant(result, 0, (ids, positions))
        assert got.shape == ref.shape == (1, ids.shape[1], 128)
        assert relative_error(got, ref) <= 1e-4, (length, step)
        next_token = ref[:, -1].argmax(-1, keepdim=True)  # greedy, eager's choice for both
        ids, positions = next_token, positions[-1:] + 1
    caches = dict(eager.named_buffers())
    state = [key for key in result.manifest.weights.state]
    assert state
    by_name = dict(zip((t.name for t in result.manifest.weights.tensors), result.weights))
    for key in state:
        assert relative_error(by_name[key].float(), caches[key].float()) <= 1e-4, key
