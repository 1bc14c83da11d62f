"""The runtime's cuBLASLt matmul with no workspace (runtime/cublaslt.py) against torch's addmm / mm
on the GPU: 16-bit operands of every layout the program hands it (a weight's transposed view, a
contiguous one, a transposed activation), with a bias of [n] or [m, n] broadcast or none, in
relative L2 within 2e-3 of torch's result (both sum in float32: what differs is the order and
the rounding to 16 bits; a wrong layout is off by ~1). Calls it does not take (few rows, a
misaligned pointer, float32) run nothing and say so; a captured call replays right."""

import pytest
import torch

from aotcombo.runtime import cublaslt, ops
from aotcombo.testing.compare import relative_error

pytestmark = pytest.mark.gpu
DTYPES = (torch.float16, torch.bfloat16)


def _operands(m, n, k, dtype, weight_view: bool, mat1_transposed: bool):
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    mat1 = x.t().contiguous().t() if mat1_transposed else x
    w = torch.randn(n, k, device="cuda", dtype=dtype, generator=g) / k ** 0.5
    mat2 = w.t() if weight_view else w.t().contiguous()
    return mat1, mat2, torch.randn(n, device="cuda", dtype=dtype, generator=g)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1024, 768, 768), (4096, 3072, 768), (16384, 768, 3072), (3000, 2304, 768)])
@pytest.mark.parametrize("layout", ["weight_view", "contiguous", "mat1_transposed"])
@pytest.mark.parametrize("bias", ["none", "vector", "broadcast"])
def test_matmul_matches_torch(dtype, m, n, k, layout, bias):
    mat1, mat2, b = _operands(m, n, k, dtype, layout != "contiguous", layout == "mat1_transposed")
    bias_arg = {"none": None, "vector": b, "broadcast": b.expand(m, n)}[bias]
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    assert cublaslt.matmul(mat1, mat2, bias_arg, out)
    want = torch.mm(mat1, mat2) if bias_arg is None else torch.addmm(b, mat1, mat2)
    torch.cuda.synchronize()
    assert relative_error(out.float(), want.float()) <= 2e-3


def test_calls_it_does_not_take_run_nothing():
    mat1, mat2, b = _operands(1024, 768, 768, torch.float16, True, False)
    out = torch.full((1024, 768), 7.0, device="cuda", dtype=torch.float16)
    few = torch.empty(cublaslt.MIN_ROWS - 1, 768, device="cuda", dtype=torch.float16)
    assert not cublaslt.matmul(mat1[: cublaslt.MIN_ROWS - 1], mat2, b, few)
    shifted = torch.empty(1024 * 768 + 8, device="cuda", dtype=torch.float16)[8:].view(1024, 768)
    assert not cublaslt.matmul(mat1, mat2, b, shifted)
    assert not cublaslt.matmul(mat1.float(), mat2.float(), b.float(), out.float())
    assert bool((out == 7).all())


def test_a_captured_call_replays_with_new_inputs():
    mat1, mat2, b = _operands(2048, 1024, 512, torch.bfloat16, True, False)
    out = torch.empty(2048, 1024, device="cuda", dtype=torch.bfloat16)
    cublaslt.matmul(mat1, mat2, b, out)  # plans made before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert cublaslt.matmul(mat1, mat2, b, out)
    mat1.copy_(torch.randn_like(mat1))
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out.float(), torch.addmm(b, mat1, mat2).float()) <= 2e-3


def test_the_program_calls_it_only_while_a_graph_is_captured(monkeypatch):
    mat1, mat2, b = _operands(2048, 1024, 512, torch.float16, True, False)
    out, taken = torch.empty(2048, 1024, device="cuda", dtype=torch.float16), []
    real = cublaslt.matmul
    monkeypatch.setattr(cublaslt, "matmul", lambda *args: taken.append(args) or real(*args))
    cublaslt._handles.pop(torch.cuda.current_device(), None)  # as in a fresh process: no handle yet
    cublaslt._plans.clear()  # the plan is made in the capture, as the package's are
    ops.addmm_lt(b, mat1, mat2, out=out)  # op by op (a graph's warm-up): torch's call; the handle made
    assert not taken and torch.cuda.current_device() in cublaslt._handles
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.addmm_lt(b, mat1, mat2, out=out)
    assert len(taken) == 1
    mat1.copy_(torch.randn_like(mat1))
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out.float(), torch.addmm(b, mat1, mat2).float()) <= 2e-3


def _planned(m: int, n: int, k: int):
    """A fresh plan for the fp16 linear [m, k] x [k, n] + bias (the weight a transposed view), run
    and checked against torch: (the library, the device's index, the plan's key, the plan)."""
    lib = cublaslt._library()
    mat1, mat2, b = _operands(m, n, k, torch.float16, True, False)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    cublaslt._plans.clear()
    assert cublaslt.matmul(mat1, mat2, b, out)
    ((device, key), plan), = cublaslt._plans.items()
    torch.cuda.synchronize()
    assert relative_error(out.float(), torch.addmm(b, mat1, mat2).float()) <= 2e-3
    return lib, device, key, plan


def _rules() -> tuple:
    rules = cublaslt.PREFERRED.get(torch.cuda.get_device_capability()[0], ())
    if not rules:
        pytest.skip("no preferred configuration for this arch")
    return tuple(config for _, config in rules)


def test_the_plan_takes_the_preferred_configuration_where_offered():
    """On an arch with a preference (``PREFERRED``: sm_90), a GEMM whose offers hold it (FFN-up of
    BERT-base at 8192 rows: so on torch 2.11's cuBLAS, whose heuristic ranks another first) runs it
    and matches torch."""
    preferred = _rules()[0]
    lib, device, key, plan = _planned(8192, 3072, 768)
    assert cublaslt._is_preferred(lib, plan[-1].algo, preferred), "this cuBLAS does not offer it: remeasure"
    first = cublaslt._plan(lib, cublaslt._handle(lib, device), key)  # no preference: the heuristic's first
    assert not cublaslt._is_preferred(lib, first[-1].algo, preferred)


def test_the_plan_takes_the_second_preference_where_the_first_is_not_offered():
    """BERT-base's q/k/v at 16384 rows: torch 2.11's cuBLAS offers sm_90's second configuration (256 x
    128 tiles, from 4096 rows) but not its first; the plan takes the second and matches torch."""
    rules = _rules()
    if len(rules) < 2:
        pytest.skip("no second preference for this arch")
    lib, _, _, plan = _planned(16384, 2304, 768)
    assert cublaslt._is_preferred(lib, plan[-1].algo, rules[1]), "this cuBLAS does not offer it: remeasure"
    assert not cublaslt._is_preferred(lib, plan[-1].algo, rules[0])
