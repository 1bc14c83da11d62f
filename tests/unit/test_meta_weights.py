"""A model whose parameters are on the meta device (shapes and dtypes, no bytes: how
sample_models/full_size/llama_8b_decode.py builds 8B parameters on a small machine): it builds
with --weights external, its manifest lists the weights the load must give with their shapes
and dtypes, and the program run with the real model's state_dict (Triton's interpreter, the
runtime's own weights_for_load) matches that model in eager; --weights packaged, and a meta
tensor the package would have to hold, are clear errors before any trace."""

import pytest
import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.errors import UsageError
from aotcombo.runtime.state import weights_for_load
from aotcombo.tools import interpret
from aotcombo.tools.cli import main

VOCAB, DIM, CACHE = 64, 16, 8


class TinyLM(nn.Module):
    """An embedding, q/k/v linears of one input (the build combines them into one weight), a
    cache written at ``pos``, an LM head tied to the embedding; outside the state_dict, a
    non-persistent ``scale`` and the cache, always on the CPU."""

    def __init__(self, device=None):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, device=device)
        self.q, self.k, self.v = (nn.Linear(DIM, DIM, bias=False, device=device) for _ in range(3))
        self.head = nn.Linear(DIM, VOCAB, bias=False, device=device)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.linspace(0.5, 1.5, DIM), persistent=False)
        self.register_buffer("k_cache", torch.zeros(CACHE, DIM), persistent=False)
        self.register_buffer("v_cache", torch.zeros(CACHE, DIM), persistent=False)

    def forward(self, ids, pos):
        x = self.embed(ids)[0]  # [1, DIM]
        q, k, v = self.q(x), self.k(x), self.v(x)
        self.k_cache.index_copy_(0, pos, k)
        self.v_cache.index_copy_(0, pos, v)
        scores = (q @ self.k_cache.T) / DIM ** 0.5
        scores = scores.masked_fill(torch.arange(CACHE, device=pos.device) > pos, float("-inf"))
        return self.head(x + torch.softmax(scores, -1) @ self.v_cache * self.scale)


def _inputs(pos: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, 1), generator=g), torch.tensor([pos])


def test_meta_model_builds_external_and_matches_the_real_model(tmp_path):
    meta = TinyLM(device="meta").eval()
    result = build_package(meta, _inputs(3), arch=["sm_90"], name="meta_tiny", out=tmp_path, cache=False,
                           weights="external")
    assert all(p.is_meta for p in meta.parameters())  # nothing materialised on the way
    torch.manual_seed(0)
    real = TinyLM().eval()
    given = real.state_dict()
    w = result.manifest.weights
    external = {t.name: t for t in w.tensors if t.external}
    combined = "|".join(f"{n}.weight" for n in "qkv")
    assert set(external) == {"embed.weight", combined, "head.weight"}
    assert external[combined].parts == ("q.weight", "k.weight", "v.weight")
    assert (external[combined].shape, external[combined].part_rows) == ((3 * DIM, DIM), (DIM, DIM, DIM))
    for name in ("embed.weight", "head.weight"):
        assert (external[name].shape, external[name].dtype) == (tuple(given[name].shape), "float32")
    assert external["head.weight"].same_as == "embed.weight"  # tied, found on the meta device too
    assert w.bytes == 4 * (VOCAB * DIM + 3 * DIM * DIM + DIM + 2 * CACHE * DIM)  # the tied head counted once
    assert [t.name for t in w.tensors if not t.external] == ["scale", "k_cache", "v_cache"]
    assert w.state == ("k_cache", "v_cache")

    # The program with the real model's weights, as load(weights=real.state_dict()) gives them.
    packaged = {t.name: v for t, v in zip(w.tensors, result.weights) if not t.external}
    assert all(not v.is_meta for v in packaged.values())
    result.weights, _ = weights_for_load(result.manifest, packaged, torch.device("cpu"), given)
    for pos in range(3):
        ids, position = _inputs(pos, seed=10 + pos)
        with torch.no_grad():
            expected = real(ids, position)
        got = interpret.run_variant(result, 0, [ids, position])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    names = [t.name for t in w.tensors]
    torch.testing.assert_close(result.weights[names.index("k_cache")], real.k_cache, rtol=1e-4, atol=1e-5)
    assert bool(real.k_cache[:3].abs().sum() > 0) and bool(real.k_cache[3:].abs().sum() == 0)


def test_meta_weights_with_packaged_weights_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError) as info:
        build_package(TinyLM(device="meta").eval(), _inputs(3), arch=["sm_90"], name="meta_tiny", out=tmp_path,
                      cache=False, weights="packaged")
    assert "meta device" in info.value.message and "embed.weight" in info.value.message
    assert "--weights external" in info.value.fix
    assert not list(tmp_path.iterdir())


def test_a_meta_buffer_outside_the_state_dict_is_a_usage_error(tmp_path):
    model = TinyLM(device="meta").eval()
    model.scale = model.scale.to("meta")  # non-persistent: the package would hold it
    with pytest.raises(UsageError) as info:
        build_package(model, _inputs(3), arch=["sm_90"], name="meta_tiny", out=tmp_path, cache=False,
                      weights="external")
    assert "scale" in info.value.message and "not in its state_dict" in info.value.message


class MetaAttribute(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8, device="meta")
        self.table = torch.empty(8, device="meta")  # a plain attribute: outside the state_dict

    def forward(self, x):
        return self.lin(x) * self.table


def test_a_meta_tensor_the_trace_finds_outside_the_state_dict_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError) as info:
        build_package(MetaAttribute().eval(), (torch.randn(2, 8),), arch=["sm_90"], name="meta_attr", out=tmp_path,
                      cache=False, weights="external")
    assert "would hold table, on the meta device" in info.value.message


MODEL_FILE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4, device="meta")

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_model():
    return Net()


def get_example_inputs():
    return (torch.randn(2, 8),)
"""


def test_cli_builds_a_meta_model_file_external_only(tmp_path, capsys):
    path = tmp_path / "meta_net.py"
    path.write_text(MODEL_FILE)
    code = main(["build", str(path), "--arch", "sm_90", "--out", str(tmp_path / "packaged"), "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2 and "meta device" in err and "fix: build with --weights external" in err, err
    assert not (tmp_path / "packaged").exists()
    code = main(["build", str(path), "--arch", "sm_90", "--out", str(tmp_path / "external"), "--no-cache",
                 "--weights", "external", "--no-native", "-q"])
    assert code == 0, capsys.readouterr().err
    assert len(list((tmp_path / "external").glob("*.whl"))) == 1


def test_a_meta_model_is_traced_once_into_the_build_cache(tmp_path, monkeypatch):
    """The trace cache's key encodes a meta tensor by its spec (it has no bytes), also one a
    plain object holds (as transformers' caches hold their tensors); the second build takes
    the cached trace with the model's meta weights."""
    monkeypatch.setenv("AOTCOMBO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("AOTCOMBO_NO_CACHE", raising=False)
    caches = []
    for run in range(2):
        model = TinyLM(device="meta").eval()
        model.held = {"embedding": model.embed.weight.detach()}  # a plain dict: fingerprinted by value
        result = build_package(model, _inputs(3), arch=["sm_90"], name="meta_tiny", out=tmp_path / str(run),
                               weights="external")
        caches.append(result.cache["traces_cached"])
    assert caches == [0, 1]
    assert {t.name for t in result.manifest.weights.tensors if t.external} == {
        "embed.weight", "q.weight|k.weight|v.weight", "head.weight"}


@pytest.mark.slow
def test_llama_8b_batch_builds_from_meta_parameters(tmp_path):
    """sample_models/full_size/llama_8b_batch.py: 8B parameters on the meta device build into a
    package of our kernels alone (its linears, its per-row attention), every parameter given at load."""
    from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file

    source = model_file("llama_8b_batch", FULL_SIZE_DIR)
    model = source.get_model()
    result = build_package(model, source.get_example_inputs(), arch=["sm_90"], name="batch_8b", out=tmp_path,
                           cache=False, weights="external")
    assert all(p.is_meta for p in model.parameters())
    assert result.summary()["extern_calls"] == 0
    given = set().union(*(t.name.split("|") for t in result.manifest.weights.tensors if t.external))
    assert {name for name, _ in model.named_parameters()} <= given
    assert result.wheel.stat().st_size < 8 << 20  # the 16 GB stay out of the wheel
