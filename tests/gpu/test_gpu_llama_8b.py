"""Llama 3 8B's decode step on a GPU: the package full_llama_8b_decode, built from
sample_models/full_size/llama_8b_decode.py with its parameters on the meta device (the build
never holds the 16 GB) and ``--weights external``; here the same file makes the model with
random weights (seed 0) on the GPU, and its ``state_dict()`` is given to ``load``. Against that
eager model, in graph mode and op by op:

- ``STEPS`` steps from an empty cache, a fresh random token each: the logits at every step and
  the cache after them within max(1e-2, 2 x eager's own error) of float32 eager in relative L2
  (``aotcombo.testing.zoo.check``, as tests/gpu/test_gpu_full_size.py checks the 1B decode).
- ``TOKENS`` greedy tokens after a ``PROMPT``-token prompt fed one step at a time. Teacher-forced
  (all fed eager's tokens): at every step the package's argmax is eager's unless the two are a
  bf16 tie (``aotcombo.testing.llm.is_tie``), and the logits are within max(1e-2, 2 x eager's own
  error) of float32 eager's, tests/gpu/test_gpu_llm.py's rules. Free-running (each
  its own tokens): the tokens are eager's up to the end, or up to a first difference that is such
  a tie, replayed to see.

Built and run::

    aotcombo build sample_models/full_size/llama_8b_decode.py --weights external --arch sm_90 \\
        --name full_llama_8b_decode --out .carry/full/llama_8b_decode
    AOTCOMBO_GPU_TEST_FILES=tests/gpu/test_gpu_llama_8b.py scripts/gpu_check.sh .carry/full/llama_8b_decode

GPU memory: eager bf16 16 GB, float32 eager 32 GB, a load's combined q/k/v and gate/up weights
9 GB (its other weights are eager's own tensors): about 60 GB.
"""

import os

import pytest
import torch

from aotcombo.testing.compare import leaves, relative_error
from aotcombo.testing.gpu import import_package
from aotcombo.testing.llm import is_tie
from aotcombo.testing.zoo import FULL_SIZE_DIR, assert_all_ok, check_decode_steps, model_file

pytestmark = pytest.mark.gpu
NAME = "llama_8b_decode"
DEVICE = "cuda"
STEPS, PROMPT, TOKENS = 8, 16, 64
GRAPHS = pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])


@pytest.fixture(scope="module")
def llama():
    pytest.importorskip("transformers")
    package = import_package(f"full_{NAME}")
    source = model_file(NAME, FULL_SIZE_DIR)
    return source, package, source.get_model(device=DEVICE)


@pytest.fixture(scope="module")
def reference(llama):
    """Eager in float32 with eager's weights: the yardstick of both."""
    source, _, eager = llama
    model32 = source.get_model(dtype=torch.float32, device=DEVICE)  # not a copy: the cache holds its tensors
    model32.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in eager.state_dict().items()})
    return model32


def _empty(loaded, *models):
    """The package's state back to its loaded zeros; the same buffers of ``models`` zeroed."""
    loaded.reset_state()
    for model in models:
        buffers = dict(model.named_buffers())
        for name in loaded.state():
            buffers[name].zero_()


def _logits(out) -> torch.Tensor:
    return leaves(out)[0].reshape(1, -1)  # [1, vocab]


def _position(pos: int) -> torch.Tensor:
    return torch.tensor([pos], device=DEVICE)


def _feed(step, tokens: torch.Tensor) -> torch.Tensor:
    """``tokens`` [1, n] one step at a time at positions 0..n-1: the last one's logits."""
    for i in range(tokens.shape[1]):
        logits = _logits(step(tokens[:, i:i + 1].contiguous(), _position(i)))
    return logits


def _greedy(step, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """The prompt, then ``n`` greedy tokens, each fed back: the tokens [n]."""
    tokens = [_feed(step, prompt).argmax(-1)]
    for i in range(n - 1):
        tokens.append(_logits(step(tokens[-1][:, None], _position(prompt.shape[1] + i))).argmax(-1))
    return torch.cat(tokens)


def _log(line: str) -> None:
    print(line)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "llama_8b_check.log"), "a") as f:
            f.write(line + "\n")


@GRAPHS
def test_decode_steps_match_eager(llama, reference, graphs):
    source, package, eager = llama
    loaded = package.load(DEVICE, graphs=graphs, weights=eager.state_dict())
    _empty(loaded, eager, reference)
    report = check_decode_steps(source, loaded, eager, reference, STEPS, DEVICE, model=NAME, graphs=graphs)
    assert_all_ok(report, "llama_8b_check.jsonl")


@GRAPHS
def test_greedy_tokens_match_eager(llama, reference, graphs):
    source, package, eager = llama
    ours = package.load(DEVICE, graphs=graphs, weights=eager.state_dict())
    prompt = torch.randint(0, source.VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(7)).to(DEVICE)
    with torch.no_grad():
        # teacher-forced: all read eager's tokens
        _empty(ours, eager, reference)
        e, o, r = _feed(eager, prompt), _feed(ours, prompt), _feed(reference, prompt)
        ties, worst, worst_eager = [], 0.0, 0.0
        for step in range(TOKENS):
            worst, worst_eager = max(worst, relative_error(o, r)), max(worst_eager, relative_error(e, r))
            if int(o.argmax()) != int(e.argmax()):
                assert is_tie(e, o, 0), f"step {step}: the package's token is no tie"
                ties.append(step)
            token, position = e.argmax(-1)[:, None], _position(PROMPT + step)
            e, o, r = (_logits(model(token, position)) for model in (eager, ours, reference))
        # free-running: each its own tokens
        _empty(ours, eager)
        expected, got = _greedy(eager, prompt, TOKENS), _greedy(ours, prompt, TOKENS)
    same = bool(torch.equal(got, expected))
    line = (f"{NAME}, graphs={graphs}: teacher-forced: {TOKENS - len(ties)}/{TOKENS} argmax equal, {len(ties)} "
            f"bf16 ties {ties}; logits vs fp32 {worst:.2e} (eager {worst_eager:.2e}); free-running tokens equal: "
            f"{same}")
    if not same:
        first = int((got != expected).nonzero()[0])
        line += f" (first difference at token {first})"
    _log(line)
    assert worst <= max(1e-2, 2 * worst_eager), line
    if not same:  # the first difference must be a tie: both fed the tokens before it, then look
        _empty(ours, eager)
        context = torch.cat([prompt, expected[None, :first]], 1)
        with torch.no_grad():
            e, o = _feed(eager, context), _feed(ours, context)
        assert is_tie(e, o, 0), line
