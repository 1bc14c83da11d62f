"""The LLM decode sample on a GPU (packages llm_prefill and llm_decode, see aotcombo/testing/llm.py),
against eager, in graph mode and op by op, at batch 1 and 4:

- 64 greedy steps (a 128-token prompt, then 63 decode steps), the package fed eager's tokens:
  at every step the package's argmax is eager's, unless the two are a bf16 tie (eager's logit
  for the package's token within twice the largest logit difference the two show at that
  step); the logits and the KV cache after the 64 steps within max(1e-2, 2 x eager's own
  error) in relative L2, both measured against eager in fp32 (the issue's rule for deep bf16
  models: the cache of layers past the first carries bf16 noise of ~1e-2 in eager too).
- The same 64 steps free-running (each side feeding its own tokens): the tokens are eager's
  up to the end, or up to a first difference that is such a tie.

Loads hold their own state; reset_state() puts the loaded values back.
"""

import copy
import os

import pytest
import torch

from aotcombo.testing.compare import relative_error
from aotcombo.testing.gpu import import_package
from aotcombo.testing.llm import Packaged, generate, is_tie, prompt, sample

pytestmark = pytest.mark.gpu
STEPS = 64


@pytest.fixture(scope="module")
def llm():
    s = sample()
    model = s.get_model()
    weights = model.state_dict()
    reference = copy.deepcopy(model).float().cuda()  # eager in fp32: the yardstick for both
    eager = model.to("cuda")
    return s, eager, reference, weights, import_package("llm_prefill"), import_package("llm_decode")


def _empty_caches(*models):
    for model in models:
        for name, b in model.named_buffers():
            if name.endswith("_cache"):
                b.zero_()


def _log(line: str) -> None:
    print(line)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "llm_check.log"), "a") as f:
            f.write(line + "\n")


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_greedy_decode_matches_eager(llm, graphs, batch):
    s, eager, reference, weights, prefill, decode = llm
    ours = Packaged(prefill, decode, weights, graphs=graphs)
    x = prompt(batch, seed=7 + batch)
    t = x.shape[1]
    with torch.no_grad():
        # teacher-forced: every model reads eager's tokens
        _empty_caches(eager, reference)
        inputs = [(x, torch.arange(t, device="cuda"))]
        ties, worst, worst_eager = [], 0.0, 0.0
        for step in range(STEPS):
            e = eager(*inputs[-1])
            o = ours.prefill(*inputs[-1]) if step == 0 else ours.decode(*inputs[-1])
            r = reference(*inputs[-1])
            worst, worst_eager = max(worst, relative_error(o, r)), max(worst_eager, relative_error(e, r))
            for row in range(batch):
                if int(o[row].argmax()) != int(e[row].argmax()):
                    assert is_tie(e, o, row), f"step {step}, sequence {row}: the package's token is no tie"
                    ties.append((step, row))
            inputs.append((e.argmax(-1)[:, None], torch.tensor([t + step], device="cuda")))
        theirs, fp32 = dict(eager.named_buffers()), dict(reference.named_buffers())
        cache = max(relative_error(v[:batch], fp32[k][:batch]) for k, v in ours.cache().items())
        cache_eager = max(relative_error(theirs[k][:batch], fp32[k][:batch]) for k in ours.cache())
        # free-running: each side its own tokens
        _empty_caches(eager)
        ours.reset()
        expected = generate(eager, eager, x, STEPS)
        got = generate(ours.prefill, ours.decode, x, STEPS)
    same = bool(torch.equal(got, expected))
    line = (f"batch {batch}, graphs={graphs}: teacher-forced: {STEPS * batch - len(ties)}/{STEPS * batch} argmax "
            f"equal, {len(ties)} bf16 ties {ties}; logits vs fp32 {worst:.2e} (eager {worst_eager:.2e}); cache "
            f"vs fp32 {cache:.2e} (eager {cache_eager:.2e}); free-running tokens equal: {same}")
    if not same:
        row, step = [int(i) for i in (got != expected).nonzero()[0]]
        line += f" (first difference: sequence {row}, step {step})"
    _log(line)
    assert worst <= max(1e-2, 2 * worst_eager), line
    assert cache <= max(1e-2, 2 * cache_eager), line
    if not same:  # the first difference must be a tie: replay up to it and look
        _empty_caches(eager)
        ours.reset()
        with torch.no_grad():
            prefix = expected[:, :step]
            pos = t + step - 1
            if step == 0:
                e, o = eager(x, torch.arange(t, device="cuda")), ours.prefill(x, torch.arange(t, device="cuda"))
            else:
                eager(x, torch.arange(t, device="cuda"))
                ours.prefill(x, torch.arange(t, device="cuda"))
                for i in range(step - 1):
                    p = torch.tensor([t + i], device="cuda")
                    token = prefix[:, i:i + 1].contiguous()
                    eager(token, p)
                    ours.decode(token, p)
                p = torch.tensor([pos], device="cuda")
                token = prefix[:, -1:].contiguous()
                e, o = eager(token, p), ours.decode(token, p)
        assert is_tie(e, o, row), line


def test_loads_hold_their_own_state_and_reset_restores_it(llm):
    s, eager, reference, weights, prefill, decode = llm
    first, second = decode.load("cuda", weights=weights), decode.load("cuda", weights=weights)
    assert set(first.state()) == {f"layers.{i}.attention.{c}_cache" for i in range(s.LAYERS) for c in "kv"}
    token, pos = torch.tensor([[17]], device="cuda"), torch.tensor([5], device="cuda")
    first(token, pos)
    torch.cuda.synchronize()
    written = first.state()["layers.0.attention.k_cache"]
    assert bool(written[0, :, 5].abs().sum() > 0)  # the step wrote position 5 of sequence 0
    assert all(bool(t.abs().sum() == 0) for t in second.state().values())  # the other load saw nothing
    first.reset_state()
    assert all(bool(t.abs().sum() == 0) for t in first.state().values())  # back to the loaded (zero) cache
    with pytest.raises(ValueError, match="was built with --weights external"):
        decode.load("cuda")


def test_the_readme_generation_loop_runs(llm, capsys, monkeypatch):
    """The README's "An LLM decode loop" example, run as written (from the repository root)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    section = (root / "README.md").read_text().split("## An LLM decode loop", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(root)
    exec(compile(code, "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    tokens = eval(printed)  # noqa: S307 - the list the example prints
    assert len(tokens) == 1 and len(tokens[0]) == 64 and all(0 <= t < 32000 for t in tokens[0])
