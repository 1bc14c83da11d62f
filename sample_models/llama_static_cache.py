"""A decode step of transformers' ``LlamaForCausalLM`` over its ``StaticCache`` (issue 12), float32.

2 layers, hidden 64, 4 attention heads sharing 2 key/value heads, SwiGLU MLP of 128, vocab
128, sdpa, a static cache of 64 positions for one sequence, random weights (seed 0). Wrapped
as transformers intends for export, ``transformers.integrations.executorch.
TorchExportableModuleWithStaticCache`` (transformers 5.x): it registers the cache's tensors
(keys, values and the 0-dim ``cumulative_length`` of each layer) as its buffers, which the
cache's layers update through their own references; they are the package's state
(``exportable.key_cache_0``, ...). Its ``forward(input_ids, inputs_embeds, cache_position)``
sets each layer's length to ``cache_position[0]`` and returns the logits [1, T, vocab];
``Step`` passes ``input_ids`` [1, 1] and ``cache_position`` [1] (int64) by keyword.

One position for the whole batch, by transformers' design (5.24): each ``StaticLayer`` keeps
one 0-dim ``cumulative_length`` and writes every row's keys at ``arange(T) +
cumulative_length`` (``index_copy_`` along the position dim); the wrapper sets it from
``cache_position[0]``, passes no attention mask, and the model derives its positions from
it. A position per sequence (``sample_models/llm_decode.py``'s ``input_pos`` [batch, T])
would need another cache layer; transformers' own way to batch prompts of different lengths
is left padding with a 2-D attention mask, every row still writing the same slot::

    aotcombo build sample_models/llama_static_cache.py --arch sm_90 --out dist/

``get_model(family=...)`` builds the same step for other decoder families of the same size
(``FAMILIES``; tests/unit/test_state.py checks each): Qwen2 (biased q/k/v), Mistral and Gemma 2/3
with a sliding window of ``WINDOW`` positions (Gemma 2: softcapped logits, eager attention, as
it has no sdpa; Gemma 3: q/k norms), Phi-3 (fused qkv and gate/up), Gemma (head_dim 16, (1 +
w) norms). For sliding layers the wrapper swaps transformers' ``StaticSlidingWindowLayer``
(whose update branches on a Python int) for a full ``StaticLayer`` of ``MAX_CACHE`` positions
and the window is the attention mask's, built from ``cache_position``: one graph serves steps
before and past the window, up to ``MAX_CACHE`` positions.
"""

import torch
from torch import nn

DTYPE = torch.float32
MAX_CACHE = 64
WINDOW = 4  # sliding window of the sliding families: a few decode steps cross it

# family: (config class, model class, config keywords beyond the common ones)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": WINDOW}),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 16}),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": WINDOW, "attn_implementation": "eager"}),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               {"head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": WINDOW}),
}


def _decoder(family="llama", dtype=DTYPE, max_cache=MAX_CACHE):
    import transformers
    from transformers import GenerationConfig

    config_class, model_class, extra = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**{
        "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": max_cache,
        "attn_implementation": "sdpa", **extra})
    model = getattr(transformers, model_class)(config)
    for m in model.modules():  # RMSNorm weights start at 1 (Gemma's, 1 + w, at 0): make them random too
        name = type(m).__name__
        if name.endswith("RMSNorm"):
            nn.init.normal_(m.weight, 0.0 if name.startswith("Gemma") else 1.0, 0.1)
    model = model.to(dtype).eval()
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": max_cache})
    return model


class Step(nn.Module):
    """``forward(input_ids, cache_position)``: the wrapper's, without its ``inputs_embeds``."""

    def __init__(self, exportable):
        super().__init__()
        self.exportable = exportable

    def forward(self, input_ids, cache_position):
        return self.exportable(input_ids=input_ids, cache_position=cache_position)


def get_model(dtype=DTYPE, family="llama", max_cache=MAX_CACHE):
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    return Step(TorchExportableModuleWithStaticCache(_decoder(family, dtype, max_cache), batch_size=1,
                                                     max_cache_len=max_cache, device=torch.device("cpu"))).eval()


SPLIT_CACHE = 512


def get_split_model():
    """``get_model`` over a cache of ``SPLIT_CACHE`` positions: its decode attention is split over the
    keys (slices of 64), each step's rotary embedding and cache write done by the slice holding its
    position (``kernels/attention/rope_fold.py``)::

        aotcombo build sample_models/llama_static_cache.py --model-fn get_split_model \\
            --name llama_static_cache_split --arch sm_90
    """
    return get_model(max_cache=SPLIT_CACHE)


def get_example_inputs(pos=5, seed=0):
    """A decode step: one token at cache position ``pos``."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 128, (1, 1), generator=g), torch.tensor([pos]))


def get_prompt_inputs(length=9, seed=0):
    """A prefill: a prompt of ``length`` tokens at cache positions 0..length-1."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 128, (1, length), generator=g), torch.arange(length))


def get_dynamic_axes():
    """One package for prompts of any length and the decode steps after them (a step is a
    prompt of one token): ``--dynamic seq=1:64 --inputs-fn get_prompt_inputs``."""
    return {"input_ids": {1: "seq"}, "cache_position": {0: "seq"}}
