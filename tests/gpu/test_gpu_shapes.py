"""Packages built for several batch sizes, on a GPU: every sample built with buckets
(``--batch 1,2,4,8,16,32 --pad``) and with a dynamic batch (``--dynamic batch=1:256``)
matches eager at each bucket size, at sizes between buckets (padded), at sizes inside
the dynamic range, in op-by-op and graph mode; a size outside gives a clear error.

Wheels: ``scripts/build_wheels.py`` builds ``<sample>_buckets`` and ``<sample>_dynamic``.
"""

import pytest
import torch

from aotcombo.builder.inputs import shapes
from aotcombo.builder.inputs.modelfile import batch_inputs_function, load_model_file

from aotcombo.testing.compare import compare
from aotcombo.testing.gpu import SAMPLES, fresh_like, import_package

pytestmark = pytest.mark.gpu
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
BUCKETS = (1, 2, 4, 8, 16, 32)
DYNAMIC = (1, 256)


@pytest.fixture(scope="module", params=SAMPLES)
def sample(request):
    """(name, eager model on the GPU, inputs(batch) -> fresh random GPU inputs)."""
    path = ROOT / "sample_models" / f"{request.param}.py"
    model, example = load_model_file(path)
    make = batch_inputs_function(path)
    by_size, batched = shapes.example_inputs_by_size(example, [2, 3], make)
    generator = torch.Generator(device="cuda").manual_seed(99)

    def inputs(batch: int) -> list[torch.Tensor]:
        made = make(batch) if make is not None else shapes.cut_or_tile(example, batched, batch)
        return [fresh_like(t.cuda(), generator) for t in made]

    return request.param, model.cuda(), inputs


def _check(name, loaded, model, inputs, what):
    with torch.no_grad():
        ref = model(*inputs)
    got = loaded(*inputs)
    for error, tolerance in compare(got, ref):
        assert error <= tolerance, f"{name} {what}: relative L2 error {error:.2e} > {tolerance:.0e}"


@pytest.mark.parametrize("graphs", [False, True], ids=["op_by_op", "graph"])
def test_buckets_match_eager_at_every_bucket_and_padded_size(sample, graphs):
    name, model, inputs = sample
    package = import_package(f"{name}_buckets")
    assert package.manifest.shapes.sizes == tuple(BUCKETS) and package.manifest.shapes.pad
    loaded = package.load("cuda", graphs=graphs)
    for batch in BUCKETS + (3, 5, 31):  # the buckets, then padded sizes
        _check(name, loaded, model, inputs(batch), f"batch {batch}")
    with pytest.raises(ValueError, match="batch size 33 is not one this package was built for"):
        loaded(*inputs(33))


def test_buckets_load_lazily_and_share_weights(sample):
    name, _, inputs = sample
    loaded = import_package(f"{name}_buckets").load("cuda", graphs=False)
    loaded(*inputs(4))
    assert sorted(loaded._models) == [4]
    loaded.warm_up()
    assert sorted(loaded._models) == list(BUCKETS)
    weights = {id(m.weights) for m in loaded._models.values()}
    assert len(weights) == 1, "every bucket should use the device's one copy of the weights"


@pytest.mark.parametrize("graphs", [False, True], ids=["op_by_op", "graph_per_size"])
def test_dynamic_batch_matches_eager_inside_its_range(sample, graphs):
    name, model, inputs = sample
    package = import_package(f"{name}_dynamic")
    assert package.manifest.shapes.ranges == {"batch": tuple(DYNAMIC)}
    loaded = package.load("cuda", graphs=graphs, capture_after=2)
    for batch in (1, 2, 3, 17, 100, 256, 3):  # 3 again: a replay of the graph captured for it
        _check(name, loaded, model, inputs(batch), f"batch {batch}")
    if graphs:
        assert loaded.sizes() == [3]  # the one size called twice: captured at its second call
        static = loaded.static_inputs(5)
        for t, fresh in zip(static, inputs(5)):
            t.copy_(fresh)
        _check(name, loaded, model, [t.clone() for t in static], "batch 5, static inputs")
        assert loaded(*static) is not None
    with pytest.raises(ValueError, match=r"batch size 257 is outside the range 1\.\.256"):
        loaded(*inputs(257))
