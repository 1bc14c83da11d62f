"""A decode step of transformers' ``LlamaForCausalLM`` over its ``StaticCache`` (issue 12), float32.

2 layers, hidden 64, 4 attention heads sharing 2 key/value heads, SwiGLU MLP of 128, vocab
128, sdpa, a static cache of 64 positions for one sequence, random weights (seed 0). Wrapped
as transformers intends for export, ``transformers.integrations.executorch.
TorchExportableModuleWithStaticCache`` (transformers 5.x): it registers the cache's tensors
(keys, values and the 0-dim ``cumulative_length`` of each layer) as its buffers, which the
cache's layers update through their own references; they are the package's state
(``exportable.key_cache_0``, ...). Its ``forward(input_ids, inputs_embeds, cache_position)``
sets each layer's length to ``cache_position[0]`` and returns the logits [1, T, vocab];
``Step`` passes ``input_ids`` [1, 1] and ``cache_position`` [1] (int64) by keyword::

    aotcombo build sample_models/llama_static_cache.py --arch sm_90 --out dist/
"""

import torch
from torch import nn

DTYPE = torch.float32
MAX_CACHE = 64


def _llama(dtype=DTYPE):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_CACHE,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config)
    for m in model.modules():  # RMSNorm weights start at 1: make them random too
        if type(m).__name__ == "LlamaRMSNorm":
            nn.init.normal_(m.weight, 1.0, 0.1)
    model = model.to(dtype).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": MAX_CACHE})
    return model


class Step(nn.Module):
    """``forward(input_ids, cache_position)``: the wrapper's, without its ``inputs_embeds``."""

    def __init__(self, exportable):
        super().__init__()
        self.exportable = exportable

    def forward(self, input_ids, cache_position):
        return self.exportable(input_ids=input_ids, cache_position=cache_position)


def get_model(dtype=DTYPE):
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    return Step(TorchExportableModuleWithStaticCache(_llama(dtype), batch_size=1, max_cache_len=MAX_CACHE,
                                                     device=torch.device("cpu"))).eval()


def get_example_inputs(pos=5, seed=0):
    """A decode step: one token at cache position ``pos``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 128, (1, 1), generator=g), torch.tensor([pos]))
