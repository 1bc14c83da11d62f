"""A Llama 3 8B decode step over transformers' ``StaticCache``, bf16: ``llama_1b_decode.py`` at
Llama-3-8B's shapes (32 layers, hidden 4096, 32 query heads sharing 8 key/value heads of 128,
SwiGLU 14336, vocab 128256, rope theta 500000, untied LM head; 8.03B parameters, 16 GB), one
token at a time into a static cache of ``MAX_CACHE`` positions (batch 1) that the package keeps
as state, the position given as ``cache_position``.

``get_model()`` (the build's call) makes it with its parameters on the meta device: shapes and
dtypes without bytes, so ``aotcombo build`` traces it without ever holding 16 GB; only
``--weights external`` builds it (the weights come at load time). Its buffers are real: the
cache's zeros and the rotary frequencies, outside the ``state_dict``, are packaged.
``get_model(device="cuda")`` makes the same model with random weights (seed 0) on the GPU, for
the eager reference and ``load(weights=model.state_dict())``::

    aotcombo build sample_models/full_size/llama_8b_decode.py --weights external --arch sm_90 \\
        --name full_llama_8b_decode --out .carry/full/llama_8b_decode
"""

import torch
from _wrappers import CacheStep, default_dtype, parameters_on_meta

MAX_CACHE = 1024
VOCAB = 128256


def config(dtype=torch.bfloat16):
    """Llama 3 8B's config (no rope scaling: Llama 3.0's, 8192 positions)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, attn_implementation="sdpa",
        torch_dtype=dtype)


def get_model(dtype=torch.bfloat16, device="meta"):
    """``device="meta"``: parameters on the meta device, buffers on the CPU (the build's model).
    Another device: the model with random weights made there from the start (the cache's
    layers hold its tensors themselves, so a ``.to(device)`` afterwards would leave them)."""
    from transformers import GenerationConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    torch.manual_seed(0)
    meta = torch.device(device).type == "meta"
    where = parameters_on_meta() if meta else torch.device(device)
    with where, default_dtype(dtype):
        model = LlamaForCausalLM(config(dtype)).to(dtype).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": MAX_CACHE})
    exportable = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=MAX_CACHE,
                                                      device=torch.device("cpu" if meta else device))
    return CacheStep(exportable).eval()


def get_example_inputs(pos=5, seed=0):
    """A decode step: one token at cache position ``pos``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, VOCAB, (1, 1), generator=g), torch.tensor([pos]))
