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
from aotcombo.testing.compare import relative_error

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


class TiedHead(nn.Module):
    """An embedding and an LM head of one tensor, as GPT-2's and Llama 3.2's are."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(64, 16)
        self.head = nn.Linear(16, 64, bias=False)
        self.head.weight = self.embedding.weight

    def forward(self, ids):
        return self.head(torch.relu(self.embedding(ids)))


def test_tied_weights_given_at_load_are_one_tensor_on_the_device(tmp_path):
    """A state_dict names a tied tensor twice (two views of one storage): load moves it once,
    so a 1B model's tied LM head does not take its 525 MB twice on the GPU. Moved to the meta
    device here, where every move is a new tensor."""
    from aotcombo.runtime.state import weights_for_load

    torch.manual_seed(0)
    model = TiedHead().eval()
    result = build_package(model, (torch.randint(0, 64, (2, 5)),), arch=["sm_90"], name="tied", out=tmp_path,
                           cache=False, weights="external")
    w = result.manifest.weights
    assert [(t.name, t.same_as) for t in w.tensors] == [("embedding.weight", None), ("head.weight", "embedding.weight")]
    assert w.bytes == 64 * 16 * 4  # counted once
    given = model.state_dict()
    weights, _ = weights_for_load(result.manifest, {}, torch.device("meta"), given)
    assert weights[0] is weights[1] and weights[0].device.type == "meta"
    given["head.weight"] = given["head.weight"].clone()  # untied: two tensors
    weights, _ = weights_for_load(result.manifest, {}, torch.device("meta"), given)
    assert weights[0] is not weights[1]


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


class LayerCache:
    """A cache object outside the modules holding references to their buffers, as transformers'
    ``StaticCache`` does under ``TorchExportableModuleWithStaticCache``: its own ``keys``
    and ``length``, and the device it was made on."""

    def __init__(self, keys: torch.Tensor, length: torch.Tensor):
        self.keys, self.length, self.device = keys, length, keys.device

    def update(self, k):
        pos = torch.arange(k.shape[1], device=self.device) + self.length
        self.length.add_(k.shape[1])
        self.keys.index_copy_(1, pos, k)
        return self.keys


class AliasedCache(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(D, D)
        self.cache = {"layers": [LayerCache(torch.zeros(2, SEQ, D), torch.tensor(0))]}
        self.register_buffer("keys", self.cache["layers"][0].keys, persistent=False)
        self.register_buffer("length", self.cache["layers"][0].length, persistent=False)

    def forward(self, x, pos):
        layer = self.cache["layers"][0]
        layer.length.copy_(pos[0])
        keys = layer.update(self.proj(x))
        return keys.sum(1) * x[:, 0]


def test_buffers_a_plain_object_also_holds_are_the_state(tmp_path):
    """Updates through another reference to a buffer (a cache object's) are the buffer's:
    non-strict export would trace them as updates of a constant, and drop them."""
    eager = AliasedCache().eval()
    result = build_package(AliasedCache().eval(), (torch.randn(2, 1, D), torch.tensor([3])), arch=["sm_90"],
                           name="aliased", out=tmp_path, cache=False)
    assert result.manifest.weights.state == ("keys", "length")
    names = [t.name for t in result.manifest.weights.tensors]
    g = torch.Generator().manual_seed(1)
    for pos in (0, 1, 2):
        x = torch.randn(2, 1, D, generator=g)
        with torch.no_grad():
            ref = eager(x, torch.tensor([pos]))
        got = interpret.run_variant(result, 0, [x, torch.tensor([pos])])
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(result.weights[names.index("keys")], eager.keys, rtol=1e-5, atol=1e-6)
        assert int(result.weights[names.index("length")]) == int(eager.length) == pos + 1
    assert bool(eager.keys[:, 3:].abs().sum() == 0)


def _static_cache_sample():
    from aotcombo.testing.llm import sample

    return sample("llama_static_cache")


@pytest.mark.parametrize("family, steps", [("llama", 3)] + [
    pytest.param(family, 6, marks=pytest.mark.slow) for family in
    ("qwen2", "mistral", "phi3", "gemma", "gemma2", "gemma3")])
def test_transformers_static_cache_decode_steps(family, steps, tmp_path):
    """Issue 12: ``LlamaForCausalLM`` over transformers' ``StaticCache``, wrapped by
    ``TorchExportableModuleWithStaticCache`` (sample_models/llama_static_cache.py): decode
    steps from an empty cache under the interpreter against eager, logits and cache. The other
    families (slow, ~25 s each on 2 cores) take 6 steps, past the sliding window (4) of Mistral
    and Gemma 2/3, whose window is then the mask's over the full cache; the wrapper's eager
    logits at the last step are also the plain model's over the whole sequence without a cache."""
    pytest.importorskip("transformers")
    sample = _static_cache_sample()
    result = build_package(sample.get_model(family=family), sample.get_example_inputs(), arch=["sm_90"],
                           name=f"{family}_sc", out=tmp_path, cache=False)
    state = result.manifest.weights.state
    assert state == tuple(f"exportable.{kind}_{i}" for i in (0, 1)
                          for kind in ("key_cache", "value_cache", "cumulative_length"))
    names = [t.name for t in result.manifest.weights.tensors]
    eager = sample.get_model(family=family)
    g = torch.Generator().manual_seed(7)
    tokens = []
    for pos in range(steps):
        ids, p = torch.randint(0, 128, (1, 1), generator=g), torch.tensor([pos])
        tokens.append(ids)
        with torch.no_grad():
            ref = eager(ids, p)
        got = interpret.run_variant(result, 0, [ids, p])
        assert relative_error(got, ref) <= 1e-5, f"step {pos}"
        for name in state:
            value, expected = result.weights[names.index(name)], eager.get_buffer(name)
            if "cumulative" in name:
                assert int(value) == int(expected) == pos + 1
            else:
                assert relative_error(value, expected) <= 1e-5, (pos, name)
    assert bool(eager.get_buffer("exportable.key_cache_0")[:, :, :steps].abs().sum() > 0)
    with torch.no_grad():
        whole = eager.exportable.model(torch.cat(tokens, 1), use_cache=False).logits[:, -1:]
    assert relative_error(ref, whole) <= 1e-5


class HalfUsed(nn.Module):
    """Parameters forward never reads (a VAE's encoder when only decode is traced) beside
    ones it does."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.used, self.unused = nn.Linear(D, D), nn.Linear(D, D)
        self.register_buffer("scale", torch.full((D,), 2.0))

    def forward(self, x):
        return self.used(x) * self.scale


def test_weights_forward_never_reads_are_not_packaged(tmp_path):
    model = HalfUsed().eval()
    result = build_package(model, (torch.randn(4, D),), arch=["sm_90"], name="half", out=tmp_path, cache=False)
    names = {t.name for t in result.manifest.weights.tensors}
    assert {"used.weight", "used.bias", "scale"} <= names and not any(n.startswith("unused.") for n in names)
    x = torch.randn(4, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(interpret.run_variant(result, 0, [x]), model(x), rtol=1e-5, atol=1e-5)
