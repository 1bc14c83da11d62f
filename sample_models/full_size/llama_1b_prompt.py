"""Llama 3.2 1B over transformers' ``StaticCache`` at any prompt length: one package for the
prompt and the decode steps after it (``llama_1b_decode.py``'s step, whose ``input_ids`` are
[1, seq] and ``cache_position`` [seq]), built once with symbolic ``seq``::

    aotcombo build sample_models/full_size/llama_1b_prompt.py --dynamic seq=1:2304 \\
        --inputs-fn get_prompt_inputs --weights external --arch sm_90

A prompt of ``seq`` tokens writes positions 0..seq-1 of the cache (the package's state) and
returns the logits of every position; a decode step is a prompt of one token at its position.
The cache holds ``MAX_CACHE`` positions: a 2048-token prompt and 256 steps after it. Random
weights (seed 0), bf16.
"""

import torch
from llama_1b_decode import get_model as decode_step_model

MAX_CACHE = 2304


def get_model(dtype=torch.bfloat16, device="cpu"):
    return decode_step_model(dtype, device, max_cache=MAX_CACHE)


def get_example_inputs(pos=5, seed=0, length=1):
    """``length`` tokens at cache positions ``pos``.. (by default a decode step: one token)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128256, (1, length), generator=g), torch.arange(pos, pos + length)


def get_prompt_inputs(length=128, seed=0):
    """A prompt of ``length`` tokens at positions 0..length-1: what the build traces at."""
    return get_example_inputs(0, seed, length)


def get_dynamic_axes():
    return {"input_ids": {1: "seq"}, "cache_position": {0: "seq"}}
