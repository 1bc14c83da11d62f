"""Llama 3 8B's decode step for eight sequences, each at its own position, on a GPU: the package
full_llama_8b_batch (sample_models/full_size/llama_8b_batch.py, ``--weights external``) against the
same file's model with random weights made here, its caches and eager's filled with the same random
values: ``STEPS`` steps, every row a position further each step, the logits within max(1e-2,
2 x eager's own error) of a float32 model's (``aotcombo.testing.llm.check_batch_steps``), graph
mode and op by op.

    aotcombo build sample_models/full_size/llama_8b_batch.py --weights external --arch sm_90 \\
        --no-pdl --name full_llama_8b_batch

GPU memory: eager bf16 16 GB, the float32 model 32 GB, the load's combined weights 9 GB.
"""

import pytest
import torch

from aotcombo.testing.gpu import import_package
from aotcombo.testing.llm import batch_models, check_batch_steps
from aotcombo.testing.zoo import FULL_SIZE_DIR, model_file

pytestmark = pytest.mark.gpu
STEPS = 4


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_eight_positions_match_eager(graphs):
    package = import_package("full_llama_8b_batch")
    source = model_file("llama_8b_batch", FULL_SIZE_DIR)
    with torch.no_grad():
        rows = check_batch_steps(source, *batch_models(source, package, graphs=graphs), STEPS)
    assert all(r["ok"] for r in rows), rows
