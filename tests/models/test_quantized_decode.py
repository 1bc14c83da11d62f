"""sample_models/quantized_decode.py built for sm_90 and run under Triton's interpreter on fresh
random inputs: int8 at batch 1 (GEMVs) and 32 (Inductor's dequantize-then-matmul), int4 at
batch 1 (GEMVs, a k of 1536 in a step of 1024 and a masked one) and 16 (tensor-core tiles).
Tolerance (relative L2 against the model in float64, its bytes dequantized exactly):
max(1e-2, 2 x eager bf16's own error)."""

import copy

import pytest
import torch

from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.testing.paths import sample_model
from aotcombo.tools import interpret

sample = sample_model("quantized_decode")


@pytest.mark.parametrize("model_fn, batch, ours", [("get_model", 1, 9), ("get_int4_model", 1, 9),
                                                   ("get_int4_model", 16, 9), ("get_model", 32, 0)])
def test_the_sample_matches_eager(tmp_path, model_fn, batch, ours):
    model = getattr(sample, model_fn)()
    result = build_package(model, sample.get_example_inputs(batch), arch=["sm_90"], out=tmp_path, cache=False)
    kernels = [s.kernel.source.splitlines()[2] for c in result.variants[0].plan.combos for s in c.subs
               if s.kernel.heuristic == "matmul"]
    # per layer q/k/v, o, gate/up and down, then the head; past 16 rows none
    assert sum("(weight int" in k for k in kernels) == ours
    if batch == 1:  # q/k/v, gate/up and the head: squares summed in the loop that reads W, 1 / rms after it
        sources = [s.kernel.source for c in result.variants[0].plan.combos for s in c.subs
                   if "rms norm first" in s.kernel.source.splitlines()[2]]
        assert len(sources) == 5 and all("squares +=" in s and "row statistics" not in s for s in sources)
    quantized = torch.uint8 if model_fn == "get_int4_model" else torch.int8
    assert sum(w.dtype == quantized for w in result.weights) == 9  # 4 per layer (combined), the head
    fresh = sample.get_example_inputs(batch, seed=1)
    got = interpret.run_variant(result, 0, list(fresh))
    with torch.no_grad():
        eager = model(*fresh)
        exact = copy.deepcopy(model).double()(fresh[0], fresh[1].double(), fresh[2].double())
    assert relative_error(got, exact) <= max(1e-2, 2 * relative_error(eager, exact))
