"""Dynamic ranges a model does not allow: the build error says what the model's code needs of
the axis, solved for it (``seq != 2``, seq fixed at 12), the model's line that needs it (found
by tracing again with ``torch.export.draft_export``), and the ``--dynamic`` that builds."""

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace.axis_errors import Dims
from aotcombo.errors import UnsupportedModelError
from aotcombo.runtime.manifest import Dynamic


class Positions(nn.Module):
    """A Python loop over the sequence: one trace holds one length."""

    def forward(self, x):
        return torch.stack([x[:, i] * i for i in range(x.shape[1])], 1)


class Trigrams(nn.Module):
    """MobileBERT's trigram embedding: a slice and a pad that take a length of 2 apart."""

    def forward(self, x):
        return torch.cat([F.pad(x[:, 1:], [0, 0, 0, 1]), x, F.pad(x[:, :-1], [0, 0, 1, 0])], 2)


def _build(model, tmp_path, seq=(1, 32)):
    x = torch.randn(2, 12, 4)
    build_package(model, (x,), arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                  shapes=Dynamic(batch=(1, 4), seq=seq), dynamic_axes={"x": {0: "batch", 1: "seq"}})


def _error(model, tmp_path) -> str:
    with pytest.raises(UnsupportedModelError) as caught:
        _build(model, tmp_path)
    return str(caught.value)


def test_a_length_the_code_fixes_names_the_line(tmp_path):
    message = _error(Positions(), tmp_path)
    assert "the model's code fixes seq at 12 at test_axis_errors.py:" in message
    assert "(`return torch.stack([x[:, i] * i for i in range(x.shape[1])], 1)`)" in message
    assert "fix: leave seq out of --dynamic" in message and "--buckets seq=" in message


def test_a_length_the_code_takes_apart_names_it_and_the_range_that_builds(tmp_path):
    message = _error(Trigrams(), tmp_path)
    assert "seq in 1..32: the model needs seq != 2 at test_axis_errors.py:" in message
    assert "F.pad(x[:, 1:], [0, 0, 0, 1])" in message
    assert "fix: build with --dynamic seq=3:32" in message


def test_the_range_that_builds_builds(tmp_path):
    _build(Trigrams(), tmp_path, seq=(3, 32))


@pytest.mark.parametrize("guard,said", [
    ("((-1) + L['x'].size()[1]) != 1", "seq != 2"),
    ("L['x'].size()[1] <= 128", "seq <= 128"),
    ("(-2)*L['x'].size()[1] >= -64", "seq <= 32"),
    ("L['x'].size()[1] == 7", "seq == 7"),
    ("L['x'].size()[1]*L['x'].size()[1] <= 100", "seq**2 <= 100"),
])
def test_guards_are_said_for_the_axis(guard, said):
    dims = Dims()
    dims.name_axis("L['x'].size()[1]", "seq")
    assert dims.said(dims.parse(guard)) == said


def test_draft_export_guards_parse_over_the_same_dims():
    dims = Dims()
    dims.name_axis("L['x'].size()[1]", "seq")
    ours = dims.parse("((-1) + L['x'].size()[1]) != 1")
    theirs = dims.parse("Ne(s70 - 1, 1)", {"s70": "L['x'].size()[1]"})
    assert sympy.simplify(ours) == sympy.simplify(theirs)
