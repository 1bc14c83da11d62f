"""Graph mode with dynamic axes (``runtime/per_size.py``) on the CPU, with a fake capture: a
graph per distinct batch size at its second call, at most ``max_graphs`` held, the least
recently called dropped for a new capture, one-off sizes never pushing out recurring ones."""

from types import SimpleNamespace

import pytest
import torch

from aotcombo.runtime import ops
from aotcombo.runtime.inputs import make_input_check
from aotcombo.runtime.per_size import GraphPerSize
from aotcombo.testing import manifests

CPU = torch.device("cpu")


class _Graph:
    """Replays "y = 2 x" from the static input into the static output, as a graph would."""

    def __init__(self, x):
        self.x, self.y = x, torch.empty_like(x)

    def replay(self):
        torch.mul(self.x, 2, out=self.y)


def _per_size(max_graphs: int, capture_after: int = 2):
    specs = manifests.specs({"name": "x", "shape": ["batch", 3], "stride": [3, 1], "dtype": "float32",
                             "align": 16})
    ranges = {"batch": (1, 64)}
    model = SimpleNamespace(name="m", variant="sm_90", device=CPU, weights=[], specs=specs, mutated=(), names=["x"],
                            ranges=ranges, input_check=make_input_check(specs, CPU, ranges, exact_layout=False),
                            kernels=[], state_buffers=None, run=lambda inputs: _run(inputs, fresh), context=1,
                            collectives=False)
    captured, fresh = [], []

    def capturer(run, inputs, device, pool, state):
        captured.append(inputs[0].shape[0])
        graph = _Graph(inputs[0])
        return graph, (graph.y,)

    per_size = GraphPerSize(model, max_graphs=max_graphs, capturer=capturer, capture_after=capture_after)
    per_size._order = SimpleNamespace(join=lambda: None)  # one stream: nothing to order
    per_size.fresh = fresh  # per op-by-op call: whether it ran in ops.fresh_shapes()
    return per_size, captured


def _run(inputs, fresh: list):
    fresh.append(getattr(ops._fresh, "on", False))
    return (inputs[0] * 2,)


def _call(model, batch: int) -> None:
    x = torch.randn(batch, 3)
    assert torch.equal(model(x)[0], x * 2)


def test_a_size_captures_at_its_second_call_and_replays_after():
    model, captured = _per_size(max_graphs=4)
    for batch in (2, 2, 2, 5, 5):
        _call(model, batch)
    assert captured == [2, 5] and model.sizes() == [2, 5]


def test_past_max_graphs_the_least_recently_called_size_is_dropped():
    model, captured = _per_size(max_graphs=2)
    for batch in (1, 1, 2, 2, 1, 3, 3):  # 3's capture drops 2 (1 was called since)
        _call(model, batch)
    assert captured == [1, 2, 3] and model.sizes() == [1, 3]
    for batch in (2, 2):  # back: op by op, then captured again in place of 1
        _call(model, batch)
    assert captured == [1, 2, 3, 2] and model.sizes() == [2, 3]


def test_sizes_called_once_push_out_nothing():
    model, captured = _per_size(max_graphs=2)
    for batch in (1, 1, 2, 2):
        _call(model, batch)
    for batch in range(3, 40):  # one call each: op by op, no capture
        _call(model, batch)
    assert model.sizes() == [1, 2] and captured == [1, 2]
    assert len(model._graphs) <= (GraphPerSize.PENDING + 1) * 2  # those waiting for a second call are bounded


def test_a_size_captures_at_its_capture_after_th_call():
    model, captured = _per_size(max_graphs=2, capture_after=4)
    for batch in (1, 1, 1, 2, 2):
        _call(model, batch)
    assert captured == [] and model.sizes() == []
    _call(model, 1)
    assert captured == [1] and model.sizes() == [1]


def test_calls_before_a_capture_leave_attention_plans_out():
    """A size's calls op by op before its capture run in ``ops.fresh_shapes()`` (no cuDNN plan
    per shape); the capture's own run (here: none, the fake capture does not run) does not."""
    model, captured = _per_size(max_graphs=2, capture_after=3)
    for batch in (1, 1, 1, 1):
        _call(model, batch)
    assert model.fresh == [True, True] and captured == [1]
    q = k = v = torch.randn(1, 2, 5, 8)
    with ops.fresh_shapes():
        out = ops.attention(q, k, v, layout="bhmk")[0]
    assert torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-6)


def test_max_graphs_must_hold_one():
    with pytest.raises(ValueError, match=r"load\(\): max_graphs must be a whole number from 1, got 0"):
        _per_size(max_graphs=0)


def test_op_by_op_calls_leave_cudnn_out_until_a_sizes_capture_after_th_call():
    """load(graphs=False) with dynamic axes: like graph mode, a size's calls before its 8th run
    attention without cuDNN's per-shape plan; from the 8th on, with it."""
    from aotcombo.runtime.per_size import SizeCounts, run_counted

    specs = manifests.specs({"name": "x", "shape": ["batch", 3], "stride": [3, 1], "dtype": "float32", "align": 16})
    fresh = []
    model = SimpleNamespace(specs=specs, input_check=make_input_check(specs, CPU, {"batch": (1, 64)}, False),
                            run=lambda inputs: _run(inputs, fresh))
    counts = SizeCounts(limit=4)
    for batch in [2] * 9 + [3]:
        x = torch.randn(batch, 3)
        assert torch.equal(run_counted(model, (x,), counts, capture_after=8)[0], x * 2)
    assert fresh == [True] * 7 + [False, False] + [True]
