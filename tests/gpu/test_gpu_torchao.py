"""Models quantized by torchao's own ``quantize_`` (sample_models/torchao_decode.py), one package
per config, on a GPU against torchao's eager output: int8 and int4 weight-only, int8 and float8
dynamic activations, at batch 1 and 16 (decode rows: weight-only linears are kernels of ours)
and 64 (past the decode rule), in graph mode and op by op.

Tolerance (the issue's): relative L2 to torchao's eager output within max(1e-2, 2 x that
output's own error against the unquantized model in float64). The eager models are quantized on
the CPU from the same seed as the build's, then moved to the GPU: the package runs the weights
it holds, torchao the same bytes.

Packages (``scripts/build_wheels.py --quantized-only`` with torchao installed)::

    aotcombo build sample_models/torchao_decode.py --model-fn get_int8_weight_only_model \\
        --batch 1,16,64 --arch sm_80,sm_90 --name torchao_int8_weight_only   (and so on; float8: sm_90)

torchao must be importable on the GPU machine (carry its wheel): skipped without it.
"""

import pytest
import torch

from aotcombo.testing.compare import relative_error
from aotcombo.testing.gpu import import_package
from aotcombo.testing.paths import sample_models
from aotcombo.testing.zoo import model_file

pytestmark = pytest.mark.gpu

CONFIGS = ("int8_weight_only", "int4_weight_only", "int8_dynamic", "float8_dynamic")
STORED = {"int8_weight_only": "int8", "int4_weight_only": "uint8",  # int4: two a byte
          "int8_dynamic": "int8", "float8_dynamic": "float8_e4m3fn"}


@pytest.fixture(scope="module")
def source():
    pytest.importorskip("torchao")
    return model_file("torchao_decode", sample_models())  # it imports quantized_decode.py beside it


@pytest.fixture(scope="module")
def reference(source):
    return source.get_float_model().cuda().double()


@pytest.fixture(scope="module", params=CONFIGS)
def models(request, source):
    package = import_package(f"torchao_{request.param}")
    eager = getattr(source, f"get_{request.param}_model")().cuda()
    return request.param, package, eager


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
@pytest.mark.parametrize("batch", [1, 16, 64])
def test_matches_torchao_eager(models, source, reference, batch, graphs):
    config, package, eager = models
    m = package.load("cuda", graphs=graphs)
    for seed in (11, 22):
        tokens, k_past, v_past = (t.cuda() for t in source.get_example_inputs(batch, seed=seed))
        with torch.no_grad():
            for _ in range(2):  # graph mode: the first call runs op by op, the second replays
                got = m(tokens, k_past, v_past)
            want = eager(tokens, k_past, v_past)
            exact = reference(tokens, k_past.double(), v_past.double())
        tolerance = max(1e-2, 2 * relative_error(want, exact))
        error = relative_error(got, want)
        print(f"\n{config} batch {batch} graphs={graphs}: {error:.2e} to torchao (tolerance {tolerance:.2e}); "
              f"ours {relative_error(got, exact):.2e}, torchao {relative_error(want, exact):.2e} to float64")
        assert error <= tolerance, (config, batch, seed, error, tolerance)


def test_the_package_holds_the_quantized_bytes(models):
    """Each linear's weight is held as its quantized bytes and scales: no bf16 [N, K] of a linear."""
    config, package, _ = models
    tensors = package.manifest.weights.tensors
    qdata = [t for t in tensors if t.name.endswith(".qdata")]
    assert qdata and {t.dtype for t in qdata} == {STORED[config]}, config
    linears = {t.name.removesuffix(".qdata") for t in qdata}
    assert not [t for t in tensors if t.name in linears and t.dtype == "bfloat16"], config
