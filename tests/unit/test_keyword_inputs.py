"""Example inputs given by name (``inputs/keywords.py``): a dict, as a tokenizer returns one, or
a tuple holding None where forward's default is None.

The model takes the dict's tensors by position in its order and passes them on by keyword; the
package's inputs are named after its keys; entries left out keep forward's defaults. Checked
under the interpreter against eager called by keyword (float32, relative L2 <= 1e-5), and the
errors for keys forward does not take, values that are not tensors and None where forward's
default is not None.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from aotcombo.builder.inputs import keywords
from aotcombo.builder.inputs.modelfile import batch_inputs_function, load_model_file
from aotcombo.builder.pipeline import build_package
from aotcombo.errors import ModelFileError, UsageError
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret


class Scored(nn.Module):
    """forward(x, mask=None, bias=None, scale=2.0): the parameters after x optional, in that order."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x, mask=None, bias=None, scale=2.0):
        y = self.proj(x) * scale
        if mask is not None:
            y = y.masked_fill(~mask, 0.0)
        if bias is not None:
            y = y + bias
        return torch.relu(y)


def _model() -> Scored:
    torch.manual_seed(0)
    return Scored().eval()


def _inputs(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"bias": torch.randn(4, 16, generator=g), "x": torch.randn(4, 16, generator=g)}


def test_a_dict_builds_in_its_order_and_matches_eager_by_keyword(tmp_path):
    model = _model()
    names = list(model.state_dict())
    result = build_package(model, {**_inputs(0), "mask": None}, arch=["sm_90"], out=tmp_path, cache=False)
    assert list(model.state_dict()) == names  # the same module, its weights' names unchanged
    assert [i.name for i in result.manifest.specializations[0].inputs] == ["bias", "x"]
    fresh = _inputs(1)
    got = interpret.run_variant(result, 0, [fresh["bias"], fresh["x"]])
    with torch.no_grad():
        want = Scored.forward(_model(), x=fresh["x"], bias=fresh["bias"])
    assert relative_error(got, want) <= 1e-5
    with torch.no_grad():  # the model itself now takes them by position, in the dict's order, or by name
        assert torch.equal(model(fresh["bias"], fresh["x"]), want) and torch.equal(model(**fresh), want)


@pytest.mark.parametrize("example, message", [
    ({"x": torch.randn(4, 16), "weights": torch.randn(16)}, "does not take"),
    ({"x": torch.randn(4, 16), "scale": None}, "not Scored.forward's default"),
    ({"x": torch.randn(4, 16), "scale": 3.0}, "is a float, not a tensor"),
    ({"x": None}, "holds no tensor"),
    ({0: torch.randn(4, 16)}, "keyed by forward's parameter names"),
])
def test_bad_dicts_are_refused_by_name(example, message):
    with pytest.raises(UsageError, match=message):
        keywords.by_name(_model(), example, "example_inputs")


def test_a_model_with_its_own_forward_is_refused():
    model = _model()
    model.forward = model.forward  # an instance attribute: the class's forward would never run
    with pytest.raises(UsageError, match="cannot take them so"):
        keywords.by_name(model, _inputs(0), "example_inputs")


MODEL_FILE = """
import torch
from torch import nn


class Scored(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x, mask=None, bias=None):
        return self.proj(x) + bias


def get_model():
    return Scored()


def get_example_inputs(batch=4):
    return {"bias": torch.randn(batch, 16), "x": torch.randn(batch, 16), "mask": None}


def get_bad_inputs():
    return {"x": torch.randn(4, 16), "weight": torch.randn(16)}


def get_inputs_with_none(batch=4):
    return (torch.randn(batch, 16), None, torch.randn(batch, 16))
"""


def test_a_model_file_gives_a_dict_or_a_tuple_with_none(tmp_path):
    path = tmp_path / "scored.py"
    path.write_text(textwrap.dedent(MODEL_FILE))
    model, inputs = load_model_file(path)
    assert [t.shape for t in inputs] == [(4, 16), (4, 16)]
    assert torch.equal(model(*inputs), model.proj(inputs[1]) + inputs[0])
    assert [t.shape for t in batch_inputs_function(path)(2)] == [(2, 16), (2, 16)]
    with pytest.raises(ModelFileError, match=r"get_bad_inputs\(\) names the input 'weight'"):
        load_model_file(path, inputs_fn="get_bad_inputs")
    model, inputs = load_model_file(path, inputs_fn="get_inputs_with_none")
    assert torch.equal(model(*inputs), model.proj(inputs[0]) + inputs[1])  # (x, bias): mask left out
    assert [t.shape for t in batch_inputs_function(path, "get_inputs_with_none")(2)] == [(2, 16), (2, 16)]


def test_bert_takes_a_tokenizers_dict(tmp_path):
    """A tokenizer's dict (input_ids, token_type_ids, attention_mask: not forward's order) to
    transformers' BertModel: the package's inputs in the dict's order, matching eager by keyword
    on fresh ids, types and a padded mask (float32, relative L2 <= 1e-5)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    model = transformers.BertModel(config).eval()
    reference = transformers.BertModel(config).eval()
    reference.load_state_dict(model.state_dict())

    def tokens(seed: int) -> dict:
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, 100, (2, 12), generator=g)
        mask = torch.ones_like(ids)
        mask[1, 7:] = 0
        return {"input_ids": ids, "token_type_ids": torch.randint(0, 2, (2, 12), generator=g),
                "attention_mask": mask}

    result = build_package(model, tokens(0), arch=["sm_90"], out=tmp_path, cache=False)
    assert [i.name for i in result.manifest.specializations[0].inputs] == list(tokens(0))
    fresh = tokens(1)
    got = interpret.run_variant(result, 0, list(fresh.values()))
    with torch.no_grad():
        want = reference(**fresh)
    for name in ("last_hidden_state", "pooler_output"):
        assert relative_error(got[name], want[name]) <= 1e-5, name


def test_the_trace_cache_tells_the_dicts_orders_apart():
    from aotcombo.builder.cache.store import trace_key

    def key(example: dict) -> str:  # the two inputs are alike: only their order tells them apart
        return trace_key(keywords.by_name(_model(), example, "example_inputs")[0], tuple(example.values()), 90)

    first = _inputs(0)
    assert key(first) != key(dict(reversed(first.items())))
    assert key(first) == key(dict(first))


def test_a_dynamic_batch_by_name(tmp_path):
    """The Python API with ``make_inputs(batch)`` giving dicts too: a dynamic batch, checked at 3."""
    from aotcombo.runtime.manifest import Dynamic

    def make(batch: int) -> dict:
        return {"bias": torch.randn(batch, 16), "x": torch.randn(batch, 16), "mask": None}

    result = build_package(_model(), make(4), arch=["sm_90"], out=tmp_path, cache=False, shapes=Dynamic(1, 8),
                           make_inputs=make)
    g = torch.Generator().manual_seed(3)
    bias, x = torch.randn(3, 16, generator=g), torch.randn(3, 16, generator=g)
    got = interpret.run_variant(result, 0, [bias, x])
    with torch.no_grad():
        want = Scored.forward(_model(), x=x, bias=bias)
    assert got.shape == want.shape and relative_error(got, want) <= 1e-5


def test_a_tuple_with_none_is_named_by_position(tmp_path):
    """``(x, None, bias)``: each input named after forward's parameter at its position, the None
    (forward's default) left out; the package takes (x, bias). A None whose default is not None
    (``scale``) is refused by name."""
    g = torch.Generator().manual_seed(5)
    x, bias = torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)
    result = build_package(_model(), (x, None, bias), arch=["sm_90"], out=tmp_path, cache=False)
    assert [i.name for i in result.manifest.specializations[0].inputs] == ["x", "bias"]
    got = interpret.run_variant(result, 0, [x * 2, bias])
    with torch.no_grad():
        want = Scored.forward(_model(), x * 2, None, bias)
    assert relative_error(got, want) <= 1e-5
    with pytest.raises(UsageError, match=r"\['scale'\] is None"):
        keywords.by_position(_model(), (x, None, bias, None), "example_inputs")
