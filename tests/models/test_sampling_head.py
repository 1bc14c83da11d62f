"""An LLM sampling head (sample_models/sampling_head.py) under Triton's interpreter: the token ids
equal eager's for the same noise. Its cumulative sum over the vocabulary is a split scan (blocks
along the row handing their sums on through a zeroed workspace): the wrapper's
``workspace_0.zero_()`` is packaged, and the scan's grid has a program per block of each row."""

import pytest
import torch

from aotcombo.builder.pipeline import build_package
from aotcombo.testing.paths import sample_model
from aotcombo.tools import interpret

sampling_head = sample_model("sampling_head")  # the model file; the package is ``sampling_head``

VOCAB = 32768  # the smallest power of two whose scan Inductor splits; the file's default is 128256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_package(sampling_head.get_model(), sampling_head.get_example_inputs(2, VOCAB), arch=["sm_90"],
                         name="sampling_head", out=tmp_path_factory.mktemp("sampling_head"), cache=False,
                         native=False)


def test_the_scan_over_the_vocabulary_is_split(built):
    assert "split_scan" in {k.heuristic for k in built.variants[0].plan.graph.kernels}


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.slow)])  # 150 s each on 2 cores
def test_token_ids_equal_eagers(built, seed):
    inputs = sampling_head.get_example_inputs(2, VOCAB, seed)
    got = interpret.run_variant(built, 0, list(inputs))
    assert torch.equal(got.cpu(), sampling_head.get_model()(*inputs))
