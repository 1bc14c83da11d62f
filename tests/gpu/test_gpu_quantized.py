"""The weight-only quantized decode step (sample_models/quantized_decode.py) on a GPU: int8 with a
scale per output channel and int4 with a scale and zero point per group of 128, at batch 1, 4
and 16 (the linears kernels of ours that dequantize in registers: GEMVs at 1, tensor-core
tiles at 4 and 16) and 32 (Inductor's dequantize-then-matmul), in graph mode and op by op:
the logits within max(1e-2, 2 x eager bf16's own error) in relative L2 of the model in
float64 (its bytes dequantized exactly), and the package's weights the bytes and scales.

Packages (``scripts/build_wheels.py`` builds both)::

    aotcombo build sample_models/quantized_decode.py --batch 1,4,16,32 --arch sm_90 --name quantized_int8
    aotcombo build sample_models/quantized_decode.py --model-fn get_int4_model --batch 1,4,16,32 \\
        --arch sm_90 --name quantized_int4
"""

import copy

import pytest
import torch

from aotcombo.testing.compare import relative_error
from aotcombo.testing.gpu import import_package
from aotcombo.testing.paths import sample_model

quantized_decode = sample_model("quantized_decode")

pytestmark = pytest.mark.gpu

PACKAGES = {"quantized_int8": quantized_decode.get_model, "quantized_int4": quantized_decode.get_int4_model}


@pytest.fixture(scope="module", params=sorted(PACKAGES))
def models(request):
    package = import_package(request.param)
    eager = PACKAGES[request.param]().cuda()
    return request.param, package, eager, copy.deepcopy(eager).double()


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
@pytest.mark.parametrize("batch", [1, 4, 16, 32])
def test_logits_match_eager(models, batch, graphs):
    name, package, eager, exact = models
    m = package.load("cuda", graphs=graphs)
    for seed in (101, 202):
        tokens, k_past, v_past = (t.cuda() for t in quantized_decode.get_example_inputs(batch, seed=seed))
        with torch.no_grad():
            for _ in range(2):  # graph mode: the first call runs op by op, the second replays
                got = m(tokens, k_past, v_past)
            want = eager(tokens, k_past, v_past)
            ref = exact(tokens, k_past.double(), v_past.double())
        tolerance = max(1e-2, 2 * relative_error(want, ref))
        assert relative_error(got, ref) <= tolerance, (name, batch, seed, relative_error(got, ref), tolerance)


def test_the_package_holds_the_bytes_and_scales(models):
    """Every tensor the package holds is the model's own (or its own concatenated: q/k/v, gate/up),
    of its dtype: the bytes and the scales, never a dequantized copy."""
    name, package, eager, _ = models
    quantized = {"quantized_int8": "int8", "quantized_int4": "uint8"}[name]
    model_dtypes = {n: str(t.dtype).removeprefix("torch.") for n, t in eager.state_dict().items()}
    weights = package.manifest.weights.tensors
    assert sum(w.dtype == quantized for w in weights) >= 5  # per layer: q/k/v, o, gate/up, down; the head
    for w in weights:
        assert {model_dtypes.get(part) for part in w.name.split("|")} == {w.dtype}, w
