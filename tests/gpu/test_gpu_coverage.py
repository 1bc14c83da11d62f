"""Every coverage construct's package on a GPU matches eager (fresh random inputs).

The packages (cov_<construct>) are built on the GPU-less machine by
scripts/build_wheels.py and installed by scripts/gpu_check.sh.
"""

import pytest
import torch

from aotcombo.testing.compare import compare
from aotcombo.testing.corpora import coverage_models as _coverage_models
from aotcombo.testing.gpu import import_package

coverage_models = _coverage_models()

pytestmark = pytest.mark.gpu


def fresh(t, generator):
    if not t.is_floating_point():
        return t.clone()
    if t.dim() and bool((t > 0).all()):
        return (torch.rand(t.shape, generator=generator, device=t.device) + 0.5).to(t.dtype)
    return torch.randn(t.shape, generator=generator, device=t.device).to(t.dtype)


@pytest.mark.parametrize("name", sorted(coverage_models.SUPPORTED))
def test_construct_matches_eager_on_gpu(name):
    model, example = coverage_models.SUPPORTED[name]()
    model = model.eval().cuda()
    package = import_package(f"cov_{name}").load("cuda")
    generator = torch.Generator(device="cuda").manual_seed(99)
    inputs = [fresh(t.cuda(), generator) for t in example]
    _call_matches_eager(model, package, inputs, [t.clone() for t in inputs], name)


def _call_matches_eager(model, package, inputs: list, eager_inputs: list, where: str):
    """One call of each on its own copy of the inputs: the outputs within tolerance, the
    inputs the model mutates mutated alike; the package's outputs."""
    with torch.no_grad():
        ref = model(*eager_inputs)
    got = package(*inputs)
    for error, tolerance in compare(got, ref):
        assert error <= tolerance, f"{where}: relative L2 error {error:.2e} > {tolerance:.0e}"
    for mine, theirs in zip(inputs, eager_inputs):
        assert torch.equal(mine, theirs), f"{where}: input mutation differs from eager"
    return got


@pytest.mark.parametrize("name", ["inplace_input_mutation", "aliasing_outputs", "mixed_tiling_combo"])
def test_construct_in_a_loop_matches_eager(name):
    """The same input tensors call after call: graphs bound to them (runtime/bound.py) update
    the mutated input in place and answer as eager does, every call."""
    model, example = coverage_models.SUPPORTED[name]()
    model = model.eval().cuda()
    package = import_package(f"cov_{name}").load("cuda")
    generator = torch.Generator(device="cuda").manual_seed(98)
    inputs = [fresh(t.cuda(), generator) for t in example]
    eager_inputs = [t.clone() for t in inputs]
    for call in range(8):  # the last outputs held during each call, as in ``y = m(x)``: two output slots in turn
        got = _call_matches_eager(model, package, inputs, eager_inputs, f"{name}, call {call}")  # noqa: F841
    assert len(package._bound) >= 2


def test_random_ops_in_a_loop_draw_as_op_by_op():
    """With one seed, graph mode (its main graph, then graphs bound to the input) draws the
    same numbers, call after call, as op by op."""
    model, example = coverage_models.random_ops()
    x = example[0].cuda()
    draws = []
    for options in ({}, {"graphs": False}):
        package = import_package("cov_random_ops").load("cuda", **options)
        torch.cuda.manual_seed(3)
        draws.append([package(x)[1].clone() for _ in range(6)])
    for call, (graph, op_by_op) in enumerate(zip(*draws)):
        assert torch.equal(graph, op_by_op), f"call {call}: graph mode drew other numbers"
    assert not torch.equal(draws[0][0], draws[0][1])


def test_random_ops_follow_torch_cuda_manual_seed():
    model, example = coverage_models.random_ops()
    package = import_package("cov_random_ops").load("cuda")
    x = example[0].cuda()
    torch.cuda.manual_seed(5)
    a = package(x)
    torch.cuda.manual_seed(5)
    b = package(x)
    c = package(x)
    assert torch.equal(a[1], b[1]) and not torch.equal(b[1], c[1])
    assert abs(float(a[1].mean())) < 0.1 and abs(float(a[1].std()) - 1) < 0.1
    assert 0 <= float((a[0] - x).min()) and float((a[0] - x).max()) < 1
