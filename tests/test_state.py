"""Models that keep state: buffers forward updates in place (a KV cache) become the package's
state, written in place by its kernels; checked step by step against eager under Triton's
interpreter, and the errors for state a package cannot replay."""

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.errors import UnsupportedModelError
from aotcombo.runtime import manifest as m
from aotcombo.tools import interpret

BATCH, HEADS, KV, SEQ, D = 4, 4, 2, 16, 8


class TinyDecoder(nn.Module):
    """One attention layer over a static KV cache with room for BATCH sequences, written at
    ``input_pos`` (``index_copy_`` on the first b rows, or slice assignment), queries folded
    per key/value head as in sample_models/llm_decode.py."""

    def __init__(self, write: str = "index_copy"):
        super().__init__()
        torch.manual_seed(0)
        self.write = write
        self.qkv = nn.Linear(HEADS * D, (HEADS + 2 * KV) * D)
        self.register_buffer("k_cache", torch.zeros(BATCH, KV, SEQ, D))
        self.register_buffer("v_cache", torch.zeros(BATCH, KV, SEQ, D))
        self.register_buffer("causal", torch.tril(torch.ones(SEQ, SEQ, dtype=torch.bool)), persistent=False)

    def forward(self, x, input_pos):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([HEADS * D, KV * D, KV * D], dim=-1)
        q, k, v = (y.view(b, t, -1, D).transpose(1, 2) for y in (q, k, v))
        if self.write == "index_copy":
            self.k_cache[:b].index_copy_(2, input_pos, k)
            self.v_cache[:b].index_copy_(2, input_pos, v)
        else:
            self.k_cache[:b, :, input_pos] = k
            self.v_cache[:b, :, input_pos] = v
        group = HEADS // KV
        mask = self.causal[input_pos][None, None].repeat(1, 1, group, 1)
        out = F.scaled_dot_product_attention(q.reshape(b, KV, group * t, D), self.k_cache[:b], self.v_cache[:b],
                                             attn_mask=mask)
        return out.reshape(b, HEADS, t, D).transpose(1, 2).reshape(b, t, HEADS * D)


def _steps(b: int, seed: int = 5):
    """A prompt of 3 tokens at positions 0-2, then one token at a time at 3, 4, 5."""
    g = torch.Generator().manual_seed(seed)
    yield torch.randn(b, 3, HEADS * D, generator=g), torch.arange(3)
    for pos in (3, 4, 5):
        yield torch.randn(b, 1, HEADS * D, generator=g), torch.tensor([pos])


@pytest.mark.parametrize("write", ["index_copy", "setitem"])
def test_kv_cache_is_state_written_in_place_and_matches_eager(write, tmp_path):
    eager = TinyDecoder(write).eval()
    decode, prefill = [build_package(TinyDecoder(write).eval(), next(iter(_steps(2))) if t == 3 else
                                     (torch.randn(2, 1, HEADS * D), torch.tensor([3])), arch=["sm_90"],
                                     name=f"tiny_{t}", out=tmp_path / str(t), cache=False) for t in (1, 3)]
    for result in (decode, prefill):
        assert result.manifest.weights.state == ("k_cache", "v_cache")
        graph = result.variants[0].plan.graph
        assert graph.state == ("k_cache", "v_cache")
        # in place: no kernel copies a whole cache (2 x 2 x 16 x 8 = 512 elements per batch slice)
        caches = {i.name for i in graph.inputs if i.key in ("k_cache", "v_cache")}
        writers = [k for k in graph.kernels if k.mutated]
        assert all(max(dict(k.numels).values()) < 512 for k in writers), [k.numels for k in writers]
        assert caches
    # one cache shared by the two programs, as two packages sharing state at run time
    state = [t.clone() for t in prefill.weights]
    names = [t.name for t in prefill.manifest.weights.tensors]
    decode_weights = [state[names.index(t.name)] for t in decode.manifest.weights.tensors]
    for x, pos in _steps(2):
        with torch.no_grad():
            ref = eager(x, pos)
        if len(pos) == 3:
            got = interpret.run_variant(_with_weights(prefill, state), 0, [x, pos])
        else:
            got = interpret.run_variant(_with_weights(decode, decode_weights), 0, [x, pos])
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
        for name in ("k_cache", "v_cache"):
            torch.testing.assert_close(state[names.index(name)], getattr(eager, name), rtol=1e-4, atol=1e-5)
    assert bool(state[names.index("k_cache")][:2, :, :6].abs().sum() > 0)  # written where eager writes
    assert bool(state[names.index("k_cache")][2:].abs().sum() == 0)  # and nowhere else


def _with_weights(result, weights):
    result.weights = weights
    return result


def test_build_leaves_the_models_buffers_as_they_were(tmp_path):
    model = TinyDecoder().eval()
    build_package(model, (torch.randn(2, 1, HEADS * D), torch.tensor([3])), arch=["sm_90"], name="tiny",
                  out=tmp_path, cache=False, shapes=m.Buckets((1, 2), pad=True))
    assert bool(model.k_cache.abs().sum() == 0) and bool(model.v_cache.abs().sum() == 0)


def test_external_weights_stay_out_of_the_package(tmp_path):
    result = build_package(TinyDecoder().eval(), (torch.randn(2, 1, HEADS * D), torch.tensor([3])), arch=["sm_90"],
                           name="tiny", out=tmp_path, cache=False, weights="external")
    w = result.manifest.weights
    assert set(w.external) == {"qkv.weight", "qkv.bias", "k_cache", "v_cache"}  # the state_dict
    assert [t.name for t in w.tensors if not t.external] == ["causal"]  # a non-persistent buffer stays in
    assert w.file == "weights.pt"


class WritesParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        self.scale.mul_(0.5)
        return x * self.scale


class CountsInPython(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(8, 4))
        self.step = 0

    def forward(self, x):
        self.cache[self.step] = x
        self.step += 1
        return self.cache.sum(0)


@pytest.mark.parametrize("model, message", [
    (WritesParameter(), r"the model writes its parameter scale in forward at test_state.py:\d+ "
                        r"\(`self.scale.mul_\(0.5\)`\)"),
    (CountsInPython(), r"forward changes the Python attribute step \(0 -> 1\) at test_state.py:\d+ "
                       r"\(`self.step \+= 1`\)"),
])
def test_state_that_cannot_be_replayed_is_a_build_error(model, message, tmp_path):
    with pytest.raises(UnsupportedModelError, match=message) as e:
        build_package(model.eval(), (torch.randn(4),), arch=["sm_90"], name="m", out=tmp_path, cache=False)
    assert e.value.fix and not list(tmp_path.iterdir())
    assert re.search(r"register_buffer", e.value.fix)
