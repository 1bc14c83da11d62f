"""The LLM sample's decode step with a position per sequence on a GPU (packages llm_prefill and
llm_decode as tests/gpu/test_gpu_llm.py uses them; ``input_pos`` [batch, 1]), batch 8, in
graph mode and op by op, against eager:

- eight sequences at eight positions (3 to 1983) over a random cache, 64 greedy steps, every
  row a position further each step. Teacher-forced (both fed eager's tokens): at every step
  the package's argmax is eager's unless the two are a bf16 tie (``aotcombo.testing.llm.
  is_tie``, as in test_gpu_llm.py); logits and the cache positions written within
  max(1e-2, 2 x eager's own error) of eager in fp32. Free-running (each side its own tokens,
  from the same cache): eager's tokens, or a first difference that is such a tie.
- prompts of eight lengths (1 to 129) through the prefill, then 64 greedy steps of the
  decode step (``generate_ragged``), free-running, the same rule.
"""

import os

import pytest
import torch

from aotcombo.testing.compare import relative_error
from aotcombo.testing.llm import (Packaged, decode_from, first_difference, generate_ragged, is_tie, on_gpu,
                                   ragged_prompt)

pytestmark = pytest.mark.gpu
STEPS, BATCH = 64, 8
POSITIONS = [3, 17, 200, 511, 1000, 1500, 1900, 2047 - STEPS]
LENGTHS = [1, 5, 17, 33, 64, 100, 128, 129]


@pytest.fixture(scope="module")
def llm():
    return on_gpu()


def _caches(model) -> dict[str, torch.Tensor]:
    return {name: b for name, b in model.named_buffers() if name.endswith("_cache")}


def _written(cache: torch.Tensor) -> torch.Tensor:
    """The positions the 64 steps wrote, each row its own: [BATCH, kv heads, STEPS, head dim]."""
    return torch.stack([cache[row, :, p:p + STEPS] for row, p in enumerate(POSITIONS)])


def _check_free_running(expected, got, eager_logits, ours_logits) -> str:
    found = first_difference(got, expected)
    if found is None:
        return "free-running tokens equal"
    row, step = found
    assert is_tie(eager_logits[step], ours_logits[step], row), f"free-running: sequence {row}, step {step}: no tie"
    return f"free-running: first difference a tie (sequence {row}, step {step})"


def _log(line: str) -> None:
    print(line)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "llm_positions_check.log"), "a") as f:
            f.write(line + "\n")


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_eight_sequences_at_eight_positions_decode_as_eager(llm, graphs):
    s, eager, reference, weights, prefill, decode = llm
    ours = Packaged(prefill, decode, weights, graphs=graphs)
    g = torch.Generator().manual_seed(11)
    start = {name: torch.randn(b.shape, generator=g).to(b.dtype).cuda() for name, b in _caches(eager).items()}
    first = torch.randint(0, s.VOCAB, (BATCH, 1), generator=g).cuda()
    pos = torch.tensor(POSITIONS, device="cuda")[:, None]

    def fill():
        for caches in (_caches(eager), _caches(reference), ours.cache()):
            for name, b in caches.items():
                b.copy_(start[name])

    fill()
    token, ties, worst, worst_eager = first, [], 0.0, 0.0
    with torch.no_grad():
        for step in range(STEPS):  # teacher-forced: every model reads eager's tokens
            e, o, r = eager(token, pos + step), ours.decode(token, pos + step), reference(token, pos + step)
            worst, worst_eager = max(worst, relative_error(o, r)), max(worst_eager, relative_error(e, r))
            for row in range(BATCH):
                if int(o[row].argmax()) != int(e[row].argmax()):
                    assert is_tie(e, o, row), f"step {step}, sequence {row}: the package's token is no tie"
                    ties.append((step, row))
            token = e.argmax(-1)[:, None]
    fp32, theirs = _caches(reference), _caches(eager)
    cache = max(relative_error(_written(v), _written(fp32[k])) for k, v in ours.cache().items())
    cache_eager = max(relative_error(_written(theirs[k]), _written(fp32[k])) for k in fp32)
    fill()
    eager_logits, ours_logits = [], []
    with torch.no_grad():
        expected = decode_from(eager, first, pos, STEPS, eager_logits)
        got = decode_from(ours.decode, first, pos, STEPS, ours_logits)
    line = (f"batch {BATCH} at {POSITIONS}, graphs={graphs}: teacher-forced {STEPS * BATCH - len(ties)}/"
            f"{STEPS * BATCH} argmax equal, {len(ties)} bf16 ties {ties}; logits vs fp32 {worst:.2e} (eager "
            f"{worst_eager:.2e}); cache vs fp32 {cache:.2e} (eager {cache_eager:.2e}); ")
    line += _check_free_running(expected, got, eager_logits, ours_logits)
    _log(line)
    assert worst <= max(1e-2, 2 * worst_eager), line
    assert cache <= max(1e-2, 2 * cache_eager), line


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_prompts_of_eight_lengths_decode_as_eager(llm, graphs):
    s, eager, reference, weights, prefill, decode = llm
    ours = Packaged(prefill, decode, weights, graphs=graphs)
    padded, last = ragged_prompt(LENGTHS, seed=12, device="cuda")
    for b in _caches(eager).values():
        b.zero_()
    eager_logits, ours_logits = [], []
    with torch.no_grad():
        expected = generate_ragged(eager, eager, padded, last, LENGTHS, STEPS, eager_logits)
        got = generate_ragged(ours.prefill, ours.decode, padded, last, LENGTHS, STEPS, ours_logits)
    line = f"prompts of {LENGTHS} tokens, graphs={graphs}: " + _check_free_running(
        expected, got, eager_logits, ours_logits)
    _log(line)
