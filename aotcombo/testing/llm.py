"""The LLM decode sample on a GPU: the two packages over one cache, eager's own loop, and
greedy generation through either, and when the two's choices of a token are a bf16 tie (used by
tests/gpu/test_gpu_llm.py, tests/gpu/test_gpu_llama_8b.py and benchmarks/llm_bench.py).

The packages are ``llm_prefill`` and ``llm_decode``, built from ``sample_models/llm_decode.py``
with ``--weights external`` (README: "An LLM decode loop"); their weights are the model
file's (seed 0), made here and passed to ``load(weights=...)``.
"""

from __future__ import annotations

import torch

from .paths import sample_model


def sample(name: str = "llm_decode"):
    """The model file ``sample_models/<name>.py`` as a module (it shares its package's name)."""
    return sample_model(name)


class Packaged:
    """Prefill and decode packages sharing one KV cache (the prefill's state)."""

    def __init__(self, prefill_pkg, decode_pkg, weights: dict, device="cuda", **load):
        self.prefill = prefill_pkg.load(device, weights=weights, **load)
        self.decode = decode_pkg.load(device, weights=weights, state=self.prefill.state(), **load)

    def reset(self):
        self.prefill.reset_state()

    def cache(self) -> dict[str, torch.Tensor]:
        return self.prefill.state()


def generate(step_prefill, step_decode, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy generation: the prompt ([b, PROMPT] token ids) at positions 0.., then ``steps``
    tokens one at a time; returns the generated tokens [b, steps]."""
    device = prompt.device
    t = prompt.shape[1]
    logits = step_prefill(prompt, torch.arange(t, device=device))
    tokens = [logits.argmax(-1)]
    for i in range(steps - 1):
        logits = step_decode(tokens[-1][:, None], torch.tensor([t + i], device=device))
        tokens.append(logits.argmax(-1))
    return torch.stack(tokens, 1)


def prompt(batch: int, seed: int, device="cuda") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = sample()
    return torch.randint(0, s.VOCAB, (batch, s.PROMPT), generator=g).to(device)


def is_tie(eager_logits: torch.Tensor, ours_logits: torch.Tensor, row: int) -> bool:
    """The package's choice is within twice the logit difference the two show of eager's best
    (``*_logits``: [rows, vocab])."""
    mine = int(ours_logits[row].argmax())
    noise = float((ours_logits[row].float() - eager_logits[row].float()).abs().max())
    return float(eager_logits[row].max() - eager_logits[row, mine]) <= 2 * noise
