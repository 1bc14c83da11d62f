"""The LLM decode sample on a GPU: the two packages over one cache, eager's own loop, and
greedy generation through either, and when the two's choices of a token are a bf16 tie (used by
tests/gpu/test_gpu_llm.py, tests/gpu/test_gpu_llama_8b.py and benchmarks/llm_bench.py), and the
same decoder at Llama 3 8B's shapes for eight sequences (``full_size/llama_8b_batch.py``:
``batch_models``, ``check_batch_steps``; tests/gpu/test_gpu_llama_8b_batch.py, benchmarks/
llm_batch_bench.py).

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



def batch_models(source, package, device="cuda", graphs: bool | None = None) -> tuple:
    """``full_size/llama_8b_batch.py``'s eager model (random weights on ``device``), a float32
    model of the same weights, and ``package`` loaded with them (``graphs`` as ``load`` takes
    it), the caches of all three filled with the same random values."""
    eager = source.get_model(device=device)
    with torch.device(device):
        reference = source.llm_decode.Decoder(source.SHAPE).float()  # its caches too
    weights = dict(eager.named_parameters())
    for name, p in reference.named_parameters():  # one at a time: no second float32 copy of 8B
        p.copy_(weights[name])
    loaded = package.load(device, weights=eager.state_dict(), graphs=graphs)
    g = torch.Generator(device).manual_seed(1)
    eager_buffers, reference_buffers = dict(eager.named_buffers()), dict(reference.named_buffers())
    for name, tensor in loaded.state().items():
        values = torch.randn(tensor.shape, generator=g, device=device).to(tensor.dtype)
        tensor.copy_(values)
        eager_buffers[name].copy_(values)
        reference_buffers[name].copy_(values.float())
    return eager, reference, loaded


def check_batch_steps(source, eager, reference, loaded, steps: int, device="cuda") -> list[dict]:
    """``steps`` decode steps of eight sequences, each row a position further every step (from
    ``source.get_example_inputs``' positions): per step the package's logits against the float32
    model's, within max(1e-2, 2 x eager's own error) in relative L2 (test_gpu_llm.py's rule)."""
    from .compare import relative_error

    first = source.get_example_inputs()[1].view(-1).tolist()
    rows = []
    for step in range(steps):
        inputs = tuple(t.to(device) for t in source.get_example_inputs(seed=step, positions=[p + step for p in first]))
        got, want, ref = loaded(*inputs), eager(*inputs), reference(*inputs)
        error, eager_error = relative_error(got, ref), relative_error(want, ref)
        rows.append({"step": step, "error": error, "eager_error": eager_error,
                     "ok": error <= max(1e-2, 2 * eager_error),
                     "argmax_equal": bool(torch.equal(got.argmax(-1), want.argmax(-1)))})
    return rows
