"""The LLM sample's decode step with a position per sequence (``sample_models/llm_decode.py``,
``input_pos`` [batch, 1]), built as the README builds it (batch 4 here) and run under Triton's
interpreter against eager on the CPU:

- eager itself: a batch whose rows sit at their own positions computes what each row
  computes alone (batch 1, the shared [T] form) over the same cache, in float32;
- one step with rows at 3, 17, 200 and 1500 over a random cache: logits and cache against
  eager, in relative L2 within max(1e-2, 2 x eager bf16's own error), both against float32;
  no kernel copies a cache (the per-row write is in place);
- greedy decoding of prompts of different lengths (``generate_ragged``: the prefill package,
  then the decode package with every row at its own position) gives eager's tokens, token
  for token, or differs first at a bf16 tie (``aotcombo.testing.llm.is_tie``). Slow (-m
  slow: 8-11 min on 2 cores, a decode step takes 60 s or more under the interpreter, a
  third of it the 32000-wide LM head); tests/gpu/test_gpu_llm_positions.py runs 64 steps at
  batch 8.

The first two take 1.5-3 min together (the builds 20-50 s).
"""

from __future__ import annotations

import copy

import pytest
import torch

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.testing.llm import first_difference, generate_ragged, is_tie, ragged_prompt, sample
from aotcombo.tools import interpret

BATCH = 4
POSITIONS = [3, 17, 200, 1500]
LENGTHS = [1, 9, 64, 129]  # prompts: one token, short, half the prefill, the prefill plus one
STEPS = 6


def _caches(model) -> dict[str, torch.Tensor]:
    return {name: b for name, b in model.named_buffers() if name.endswith("_cache")}


def _random_cache(model, seed: int) -> None:
    g_ = torch.Generator().manual_seed(seed)
    for b in _caches(model).values():
        b.copy_(torch.randn(b.shape, generator=g_))


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    s = sample()
    decode = build_package(s.get_model(), s.get_example_inputs(batch=BATCH), arch=["sm_90"], name="llm_decode",
                           out=tmp_path_factory.mktemp("decode"), weights="external", cache=False)
    prefill = build_package(s.get_model(), s.get_prefill_inputs(batch=BATCH), arch=["sm_90"], name="llm_prefill",
                            out=tmp_path_factory.mktemp("prefill"), weights="external", cache=False)
    return s, decode, prefill


class Interpreted:
    """The decode and prefill packages under the interpreter over one set of weights and one
    cache (``state``: name -> tensor, the packages' state shared as ``load(state=...)`` shares it)."""

    def __init__(self, decode, prefill, weights: dict[str, torch.Tensor]):
        self.state = {k: v.clone() for k, v in weights.items()}
        self.decode, self.prefill = decode, prefill
        for result in (decode, prefill):
            result.weights = [self.state[t.name] if t.name in self.state else w
                              for t, w in zip(result.manifest.weights.tensors, result.weights)]

    def step_decode(self, tokens, pos):
        return interpret.run_variant(self.decode, 0, [tokens, pos])

    def step_prefill(self, tokens, pos):
        return interpret.run_variant(self.prefill, 0, [tokens, pos])


def test_eager_rows_at_their_own_positions_compute_what_each_computes_alone():
    s = sample()
    model = s.get_model().float()
    _random_cache(model, seed=3)
    cache = {k: v.clone() for k, v in _caches(model).items()}
    tokens, pos = s.get_example_inputs(batch=BATCH, seed=4, positions=POSITIONS)
    with torch.no_grad():
        together = model(tokens, pos)
        written = {k: v[:BATCH].clone() for k, v in _caches(model).items()}
        for row in range(BATCH):
            for k, v in _caches(model).items():
                v[0] = cache[k][row]  # the row's own cache in slot 0, at batch 1
            alone = model(tokens[row:row + 1], pos[row])  # the shared form: input_pos [1]
            assert relative_error(together[row], alone[0]) <= 1e-5
            for k, v in _caches(model).items():
                assert relative_error(written[k][row], v[0]) <= 1e-6
    assert all(bool((written[k][row, :, p] != cache[k][row, :, p]).any())  # each row's own position written
               for k in written for row, p in enumerate(POSITIONS))


def test_a_step_with_rows_at_four_positions_matches_eager(llm):
    s, decode, prefill = llm
    eager = s.get_model()
    _random_cache(eager, seed=5)
    reference = copy.deepcopy(eager).float()
    ours = Interpreted(decode, prefill, eager.state_dict())
    tokens, pos = s.get_example_inputs(batch=BATCH, seed=6, positions=POSITIONS)
    with torch.no_grad():
        e, r = eager(tokens, pos), reference(tokens, pos)
    o = ours.step_decode(tokens, pos)
    assert relative_error(o, r) <= max(1e-2, 2 * relative_error(e, r))
    fp32 = _caches(reference)
    for name, theirs in _caches(eager).items():
        assert relative_error(ours.state[name][:BATCH], fp32[name][:BATCH]) <= max(
            1e-2, 2 * relative_error(theirs[:BATCH], fp32[name][:BATCH])), name
    graph = decode.variants[0].plan.graph
    assert sum(k.family == "decode_attention" for k in graph.kernels) == 2  # split and combine, ours
    assert not [op for op in graph.ops if isinstance(op, g.Extern) and "attention" in op.op]
    one_cache = BATCH * s.KV_HEADS * s.MAX_SEQ * s.HEAD_DIM
    assert all(max(dict(k.numels).values()) < one_cache for k in graph.kernels if k.mutated)


@pytest.mark.slow
def test_greedy_decoding_of_prompts_of_different_lengths_matches_eager(llm):
    s, decode, prefill = llm
    eager = s.get_model()
    ours = Interpreted(decode, prefill, eager.state_dict())
    padded, last = ragged_prompt(LENGTHS, seed=8, device="cpu")
    with torch.no_grad():
        eager_logits, ours_logits = [], []
        expected = generate_ragged(eager, eager, padded, last, LENGTHS, STEPS, eager_logits)
        got = generate_ragged(ours.step_prefill, ours.step_decode, padded, last, LENGTHS, STEPS, ours_logits)
    assert ours.state["layers.0.attention.k_cache"][:BATCH].abs().sum() > 0
    found = first_difference(got, expected)
    if found is not None:
        row, step = found
        assert is_tie(eager_logits[step], ours_logits[step], row), f"sequence {row}, step {step}: no tie"
