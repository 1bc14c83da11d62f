"""transformers' StaticCache path on a GPU: the package llama_static_cache
(sample_models/llama_static_cache.py, a LlamaForCausalLM under
TorchExportableModuleWithStaticCache, float32) against eager float32 on the CPU, over 8 decode
steps from an empty cache on fresh random tokens, in graph mode and op by op: the logits at
every step and the cache tensors after the last within 1e-4 in relative L2 (float32 kernels;
the step's linears one-row GEMVs with exact float32 products), the state's lengths exact.

    aotcombo build sample_models/llama_static_cache.py --name llama_static_cache --arch sm_90
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


@pytest.mark.parametrize("graphs", [None, False])
def test_decode_steps_match_eager(graphs):
    sample = _sample()
    package = import_package("llama_static_cache")
    eager = sample.get_model()
    model = package.load("cuda", graphs=graphs)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for pos in range(STEPS):
            token, position = torch.randint(0, 128, (1, 1), generator=g), torch.tensor([pos])
            ref = _logits(eager(token, position))
            got = _logits(model(token.cuda(), position.cuda()))
            assert relative_error(got.float().cpu(), ref) <= TOLERANCE, f"step {pos}"
    buffers = dict(eager.named_buffers())
    state = model.state()
    assert state and set(state) <= set(buffers)
    for name, tensor in state.items():
        if tensor.is_floating_point():
            assert relative_error(tensor.cpu(), buffers[name]) <= TOLERANCE, name
        else:
            assert torch.equal(tensor.cpu(), buffers[name]), name
