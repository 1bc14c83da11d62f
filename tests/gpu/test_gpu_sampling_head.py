"""The LLM sampling head (sample_models/sampling_head.py, vocabulary 128256) on a GPU: the token
ids equal eager's for the same noise, at batch 1 and 16, graph mode and op by op. Its scan over
the vocabulary is split into blocks that hand their sums on through a workspace, concurrently
on a GPU (decoupled look-back), where the interpreter runs them one after the other.

Package: ``aotcombo build sample_models/sampling_head.py --batch 1,16 --arch sm_90``."""

import pytest
import torch

from aotcombo.testing.gpu import import_package
from aotcombo.testing.paths import sample_model

sampling_head = sample_model("sampling_head")  # the model file; the package is ``sampling_head``

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
@pytest.mark.parametrize("batch", [1, 16])
def test_token_ids_equal_eagers(batch, graphs):
    m = import_package("sampling_head").load("cuda", graphs=graphs)
    eager = sampling_head.get_model()
    for seed in range(4):
        inputs = [t.cuda() for t in sampling_head.get_example_inputs(batch, seed=100 + seed)]
        with torch.no_grad():
            expected = eager(*inputs)
            for _ in range(2):  # graph mode: the first call runs op by op, the second replays
                got = m(*inputs)
        assert torch.equal(got, expected), (seed, got.tolist(), expected.tolist())
