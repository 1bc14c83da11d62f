"""A Llama 3.2 1B decode step over transformers' ``StaticCache`` (``llama_1b.py``'s model and
config, bf16): one token at a time, its keys and values written into a static cache of
``MAX_CACHE`` positions that the package keeps as state (``m.state()``), the position given
as ``cache_position``. Wrapped as transformers intends for export
(``TorchExportableModuleWithStaticCache``, transformers 5.x), as ``sample_models/
llama_static_cache.py`` is at a small size. Random weights: built with ``--weights external``
(the cache's initial zeros come with the weights the GPU side gives).

``get_int8_model`` and ``get_int4_model``: the same step with every ``nn.Linear`` (the LM head
too) quantized weight-only by torchao's ``quantize_`` (the package holds the bytes and scales;
its weights are the flattened model's, ``aotcombo.quantized_state_dict(model)``)::

    aotcombo build sample_models/full_size/llama_1b_decode.py --model-fn get_int8_model \\
        --name full_llama_1b_decode_int8 --weights external --arch sm_90
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


def _untie_lm_head(model):
    """Llama 3.2 1B ties its LM head to the embedding table. ``quantize_`` gives the head a new
    weight (a tensor subclass quantized from the shared values) and leaves the embedding's as it
    was (``dtype``: a step gathers one row of it), which unties them; but the config still says
    tied, and transformers' ``tie_weights()`` (``resize_token_embeddings``, ``from_pretrained``)
    would then put the embedding's ``dtype`` weight back on the head, silently unquantized.
    So the config is untied first."""
    inner = model.exportable.model
    inner.lm_head.weight = torch.nn.Parameter(inner.lm_head.weight.detach(), requires_grad=False)
    inner.config.tie_word_embeddings = False
    return model


def get_int8_model(dtype=torch.bfloat16, device="cpu", max_cache=MAX_CACHE):
    """``get_model``'s step with every ``nn.Linear``, the LM head included, int8 weight-only
    (torchao ``Int8WeightOnlyConfig``: symmetric int8, a scale per output channel). The
    embedding table stays ``dtype`` (untied from the head: ``_untie_lm_head``)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    model = _untie_lm_head(get_model(dtype, device, max_cache))
    quantize_(model, Int8WeightOnlyConfig())
    return model


def get_int4_model(dtype=torch.bfloat16, device="cpu", max_cache=MAX_CACHE):
    """``get_model``'s step with every ``nn.Linear``, the LM head included, int4 weight-only:
    torchao ``IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128))``
    (symmetric, values -8..7, a scale per group of 128 along K). torchao holds one value a byte
    (``IntxUnpackedToInt8Tensor``); the package packs them two a byte. torchao 0.18's ``Int4WeightOnlyConfig``
    is not used: its default format calls the ``mslk`` package (installable neither here nor
    on the GPU machine), and its tile-packed format needs a GPU to quantize. The embedding
    table stays ``dtype`` (untied from the head: ``_untie_lm_head``)."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    model = _untie_lm_head(get_model(dtype, device, max_cache))
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128)))
    return model
