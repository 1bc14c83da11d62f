"""transformers' StaticCache path on a GPU: the package llama_static_cache
(sample_models/llama_static_cache.py, a LlamaForCausalLM under
TorchExportableModuleWithStaticCache, float32) against eager float32 on the CPU, over 8 decode
steps from an empty cache on fresh random tokens, in graph mode and op by op: the logits at
every step and the cache tensors after the last within 1e-4 in relative L2 (float32 kernels;
the step's linears one-row GEMVs with exact float32 products), the state's lengths exact.

    aotcombo build sample_models/llama_static_cache.py --name llama_static_cache --arch sm_90

And over a cache of 512 positions (``get_split_model``: the decode attention split into slices of 64
keys, each step's rotary embedding and cache write done by the slice holding its position), steps at
the ends of slices, the same checks::

    aotcombo build sample_models/llama_static_cache.py --model-fn get_split_model \
        --name llama_static_cache_split --arch sm_90
"""

import pytest
import torch

from aotcombo.testing.compare import relative_error
from aotcombo.testing.gpu import import_package
from aotcombo.testing.llm import sample

pytestmark = pytest.mark.gpu
STEPS, TOLERANCE = 8, 1e-4


def _sample():
    pytest.importorskip("transformers")
    return sample("llama_static_cache")


def _logits(out) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else next(iter(out.values() if isinstance(out, dict) else out))


SLICE_ENDS = (0, 1, 63, 64, 65, 127, 128, 300, 301, 511)  # positions across the split's slices of 64 keys


@pytest.mark.parametrize("graphs", [None, False])
def test_decode_steps_match_eager(graphs):
    _check_steps("llama_static_cache", "get_model", range(STEPS), graphs)


@pytest.mark.parametrize("graphs", [None, False])
def test_split_decode_steps_at_slice_ends_match_eager(graphs):
    _check_steps("llama_static_cache_split", "get_split_model", SLICE_ENDS, graphs)


def _check_steps(name: str, model_fn: str, positions, graphs):
    sample = _sample()
    package = import_package(name)
    eager = getattr(sample, model_fn)()
    model = package.load("cuda", graphs=graphs)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for pos in positions:
            token, position = torch.randint(0, 128, (1, 1), generator=g), torch.tensor([pos])
            ref = _logits(eager(token, position))
            got = _logits(model(token.cuda(), position.cuda()))
            assert relative_error(got.float().cpu(), ref) <= TOLERANCE, f"step {pos}"
    buffers = dict(eager.named_buffers())
    state = model.state()
    assert state and set(state) <= set(buffers)
    for key, tensor in state.items():
        if tensor.is_floating_point():
            assert relative_error(tensor.cpu(), buffers[key]) <= TOLERANCE, key
        else:
            assert torch.equal(tensor.cpu(), buffers[key]), key
