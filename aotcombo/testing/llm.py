"""The LLM decode sample on a GPU: the two packages over one cache, eager's own loop, and
greedy generation through either, and when the two's choices of a token are a bf16 tie (used by
tests/gpu/test_gpu_llm.py, tests/gpu/test_gpu_llama_8b.py and benchmarks/llm_bench.py).

The packages are ``llm_prefill`` and ``llm_decode``, built from ``sample_models/llm_decode.py``
with ``--weights external`` (README: "An LLM decode loop"); their weights are the model
file's (seed 0), made here and passed to ``load(weights=...)``.
"""

from __future__ import annotations

import copy

import torch

from .paths import sample_model


def sample(name: str = "llm_decode"):
    """The model file ``sample_models/<name>.py`` as a module (it shares its package's name)."""
    return sample_model(name)


def on_gpu() -> tuple:
    """What the GPU tests start from: (the model file, eager on the GPU, eager in fp32 on the
    GPU, the weights, the llm_prefill package, the llm_decode package)."""
    from .gpu import import_package

    s = sample()
    model = s.get_model()
    weights = model.state_dict()
    reference = copy.deepcopy(model).float().cuda()  # eager in fp32: the yardstick for both
    return s, model.to("cuda"), reference, weights, import_package("llm_prefill"), import_package("llm_decode")


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
    tokens one at a time (every row at the same position, given per row: [b, 1]); returns the
    generated tokens [b, steps]."""
    b, t = prompt.shape
    logits = step_prefill(prompt, torch.arange(t, device=prompt.device))
    tokens = [logits.argmax(-1)]
    for i in range(steps - 1):
        logits = step_decode(tokens[-1][:, None], torch.full((b, 1), t + i, device=prompt.device))
        tokens.append(logits.argmax(-1))
    return torch.stack(tokens, 1)


def ragged_prompt(lengths: list[int], seed: int, device="cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of the given lengths (at most PROMPT + 1), as ``generate_ragged`` takes them:
    each row's first n - 1 tokens left-aligned in [b, PROMPT] (the rest random padding), and
    each row's last token [b, 1]."""
    s = sample()
    if max(lengths) > s.PROMPT + 1 or min(lengths) < 1:
        raise ValueError(f"prompt lengths must be 1 .. {s.PROMPT + 1}, not {lengths}")
    g = torch.Generator().manual_seed(seed)
    padded = torch.randint(0, s.VOCAB, (len(lengths), s.PROMPT + 1), generator=g)
    last = padded[torch.arange(len(lengths)), torch.tensor(lengths) - 1][:, None]
    return padded[:, :s.PROMPT].to(device), last.to(device)


def generate_ragged(step_prefill, step_decode, padded: torch.Tensor, last: torch.Tensor, lengths: list[int],
                    steps: int, logits_out: list | None = None) -> torch.Tensor:
    """Greedy generation for prompts of different lengths (``sample_models/llm_decode.py``'s
    docstring): the padded prompts at 0 .. PROMPT - 1, their logits unused; then every row's
    last prompt token at its own position n - 1 and on (``decode_from``)."""
    step_prefill(padded, torch.arange(padded.shape[1], device=padded.device))
    pos = torch.tensor(lengths, device=padded.device)[:, None] - 1
    return decode_from(step_decode, last, pos, steps, logits_out)


def decode_from(step_decode, token: torch.Tensor, pos: torch.Tensor, steps: int,
                logits_out: list | None = None) -> torch.Tensor:
    """``steps`` greedy decode steps from ``token`` [b, 1] at positions ``pos`` [b, 1], each row
    a position further each step. Returns the generated tokens [b, steps]; ``logits_out`` (a
    list) gets each step's logits."""
    tokens = []
    for _ in range(steps):
        logits = step_decode(token, pos)
        if logits_out is not None:
            logits_out.append(logits)
        token, pos = logits.argmax(-1)[:, None], pos + 1
        tokens.append(token[:, 0])
    return torch.stack(tokens, 1)


def first_difference(got: torch.Tensor, expected: torch.Tensor) -> tuple[int, int] | None:
    """(row, step) of the earliest step at which some row's generated tokens differ (None if
    none): up to it every row of both sides read the same tokens, so their logits there are
    comparable (``is_tie``)."""
    differ = (got != expected).any(0)
    if not bool(differ.any()):
        return None
    step = int(differ.nonzero()[0])
    return int((got[:, step] != expected[:, step]).nonzero()[0]), step


def is_tie(eager_logits: torch.Tensor, ours_logits: torch.Tensor, row: int) -> bool:
    """The package's choice for ``row`` is within twice the logit difference the two show of
    eager's best: a bf16 tie, where the two may pick different tokens."""
    mine = int(ours_logits[row].argmax())
    noise = float((ours_logits[row].float() - eager_logits[row].float()).abs().max())
    return float(eager_logits[row].max() - eager_logits[row, mine]) <= 2 * noise


def prompt(batch: int, seed: int, device="cuda") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = sample()
    return torch.randint(0, s.VOCAB, (batch, s.PROMPT), generator=g).to(device)

