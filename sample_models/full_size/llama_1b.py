"""A Llama 3.2 1B (transformers ``LlamaForCausalLM`` with its config: 16 layers, hidden 2048,
32 heads sharing 8 key/value heads, SwiGLU 8192, vocab 128256, llama3 rope scaling, the LM
head tied to the embedding; 1.24B parameters) in bf16: a prompt's prefill.

One sequence of 128 tokens, the causal mask only; returns the logits, [1, 128, 128256].
Random weights (2.5 GB in bf16): built with ``--weights external``.

``get_float8_model``: every linear, the LM head included, quantized by torchao (float8 weights and
per-call float8 activations, per row), against ``get_model`` on a 512-token prompt
(``get_prompt_inputs``; benchmarks/float8_bench.py ``--model llama_1b``)::

    aotcombo build sample_models/full_size/llama_1b.py --name full_llama_1b_bf16 --model-fn get_model \\
        --inputs-fn get_prompt_inputs --weights external --arch sm_90
    aotcombo build sample_models/full_size/llama_1b.py --name full_llama_1b_fp8 --model-fn get_float8_model \\
        --inputs-fn get_prompt_inputs --weights external --arch sm_90
"""

import contextlib
from unittest import mock

import torch
from _wrappers import Logits


def config(dtype=torch.bfloat16):
    """Llama 3.2 1B's config (``llama_1b_decode.py`` takes it too)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        attn_implementation="sdpa", torch_dtype=dtype)


def get_model(dtype=torch.bfloat16, device="cpu"):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    return Logits(LlamaForCausalLM(config(dtype))).to(dtype).to(device).eval()


def get_example_inputs(batch=1, seq=128, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 128256, (batch, seq), generator=g),)


def get_prompt_inputs(batch=1, seq=512, seed=0):
    """A prompt of 512 tokens: what ``get_float8_model`` is measured at against ``get_model``
    (larger GEMMs than ``get_example_inputs``' 128 rows)."""
    return get_example_inputs(batch=batch, seq=seq, seed=seed)


def _untie_lm_head(model):
    """The LM head given a parameter of its own (the embedding's values), the config untied:
    ``quantize_`` then quantizes the head alone and the embedding stays ``dtype``, and transformers'
    ``tie_weights()`` cannot put the embedding's weight back on the head (as
    ``llama_1b_decode._untie_lm_head``, for this file's ``Logits``)."""
    inner = model.model
    inner.lm_head.weight = torch.nn.Parameter(inner.lm_head.weight.detach(), requires_grad=False)
    inner.config.tie_word_embeddings = False
    return model


def get_float8_model(dtype=torch.bfloat16, device="cpu"):
    """``get_model`` with torchao's ``Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())`` on
    every ``nn.Linear`` whose K and N are multiples of 16 (as ``_scaled_mm`` needs: here all of them, the LM
    head included, 2048 -> 128256): float8 weights with a scale per output channel, x quantized per row at
    each call. The embedding table stays ``dtype`` (untied from the head: ``_untie_lm_head``). bf16: torchao's
    per-row float8 takes bf16 weights only. Needs torchao; the package needs sm_89 or later (``--arch sm_90``).
    Inputs: ``get_prompt_inputs``."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quant_api, quantize_
    from torchao.quantization.granularity import PerRow

    model = _untie_lm_head(get_model(dtype=dtype, device=device))
    config = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())

    def fits(module, name):
        return (isinstance(module, torch.nn.Linear) and module.in_features % 16 == 0
                and module.out_features % 16 == 0)

    # torchao asks for an sm_89+ GPU before making float8 weights; a GPU-less build machine makes them on the CPU.
    skip = mock.patch.object(quant_api, "_check_hardware_support", lambda granularity: None)
    with skip if not torch.cuda.is_available() else contextlib.nullcontext():
        quantize_(model, config, filter_fn=fits)
    return model
