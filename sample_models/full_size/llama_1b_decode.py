"""A Llama 3.2 1B decode step over transformers' ``StaticCache`` (``llama_1b.py``'s model and
config, bf16): one token at a time, its keys and values written into a static cache of
``MAX_CACHE`` positions that the package keeps as state (``m.state()``), the position given
as ``cache_position``. Wrapped as transformers intends for export
(``TorchExportableModuleWithStaticCache``, transformers 5.x), as ``sample_models/
llama_static_cache.py`` is at a small size. Random weights: built with ``--weights external``
(the cache's initial zeros come with the weights the GPU side gives).
"""

import torch
from _wrappers import CacheStep
from llama_1b import config

MAX_CACHE = 1024


def get_model(dtype=torch.bfloat16, device="cpu", max_cache=MAX_CACHE):
    """On ``device`` from the start: the cache's layers hold its tensors themselves, so a
    ``.cuda()`` afterwards would move the module's buffers but not the cache's."""
    from transformers import GenerationConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    torch.manual_seed(0)
    model = LlamaForCausalLM(config(dtype)).to(dtype).to(device).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": max_cache})
    exportable = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=max_cache,
                                                      device=torch.device(device))
    return CacheStep(exportable).eval()


def get_example_inputs(pos=5, seed=0):
    """A decode step: one token at cache position ``pos``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 128256, (1, 1), generator=g), torch.tensor([pos]))
