"""The runtime's graph mode without a GPU (aotcombo/runtime/graphs.py, outputs.py): output trees
and copies, stream order, and a fake graph standing in for CUDA's."""

import contextlib
import time
from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch

from aotcombo.runtime import graphs
from aotcombo.runtime.graphs import GraphModel, StreamOrder, same_tensors
from aotcombo.runtime.outputs import FOREACH_FROM, OutputSlots, copy_into, flatten, unflatten, unflattener
from aotcombo.runtime.inputs import make_input_check

from aotcombo.testing import manifests
from aotcombo.testing.gpu import run_threads


CPU = torch.device("cpu")


# --- graph mode, without a GPU: output trees, copies, stream order, a fake graph ------

def test_flatten_unflatten():
    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    for tree, leaves in [(a, [a]), ((a,), [a]), ((a, b), [a, b]), ([a, None, 3], [a]), (None, []),
                         ({"s": a, "t": (b, [c])}, [a, b, c]), ((), []), ((a, {"u": None, "v": b}), [a, b]),
                         (OrderedDict([("z", a), ("y", (b,))]), [a, b])]:
        got, spec = flatten(tree)
        assert all(x is y for x, y in zip(got, leaves, strict=True))
        rebuilt = unflatten(spec, got)
        assert _same_tree(rebuilt, tree) and _same_tree(unflattener(spec)(got), tree)
        copies = [x.clone() for x in got]
        assert all(x is y for x, y in zip(flatten(unflatten(spec, copies))[0], copies, strict=True))


def _same_tree(x, y):
    if isinstance(x, torch.Tensor):
        return x is y
    if isinstance(x, (tuple, list)):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same_tree, x, y))
    if isinstance(x, dict):
        return type(x) is type(y) and list(x) == list(y) and all(_same_tree(x[k], y[k]) for k in x)
    return x == y


def test_in_strides_keeps_a_planned_layout_and_copies_another():
    from aotcombo.runtime.ops import in_strides

    planned = torch.randn(2, 8, 4, 4)
    assert in_strides(planned, planned.stride()) is planned
    other = planned.to(memory_format=torch.channels_last)
    fixed = in_strides(other, planned.stride())
    assert fixed.stride() == planned.stride() and torch.equal(fixed, planned)
    assert in_strides(torch.randn(2, 1, 3)[:, :1], (3, 7, 1)).stride()[0] == 3  # size-1 dims: any stride


@pytest.mark.parametrize("n", [1, FOREACH_FROM - 1, FOREACH_FROM, 40])
def test_copies(n):
    sources = [torch.randn(3, 5 + i)[:, 1:] for i in range(n)]  # strided views among them
    targets = [torch.empty(3, 4 + i) for i in range(n)]
    copy_into(targets, sources)
    assert all(torch.equal(t, s) for t, s in zip(targets, sources))
    copies = OutputSlots(sources, keep=0)()
    assert all(torch.equal(c, s) and c.data_ptr() != s.data_ptr() for c, s in zip(copies, sources))


def test_same_tensors():
    a, b = torch.ones(1), torch.ones(1)
    assert same_tensors((a, b), (a, b)) and same_tensors((), ())
    assert not same_tensors((a,), (a, b)) and not same_tensors((a, b), (a,)) and not same_tensors((b, a), (a, b))
    assert not same_tensors((a, b.clone()), (a, b))


class _Stream:
    def __init__(self, raw, log):
        self.raw, self.log = raw, log

    def wait_event(self, event):
        self.log.append(("wait", self.raw, event.recorded_on))


class _Event:
    recorded_on = None

    def record(self, stream):
        self.recorded_on = stream.raw


def test_stream_order():
    log, current = [], [1]
    order = StreamOrder(lambda: current[0], lambda: _Stream(current[0], log), _Event())
    order.join()
    order.join()
    assert log == []  # the first stream, then the same one: nothing to wait for
    current[0] = 2
    order.join()
    assert log == [("wait", 2, 1)]  # stream 2 waits for what stream 1 had queued
    order.join()
    current[0] = 1
    order.join()
    assert log == [("wait", 2, 1), ("wait", 1, 2)]


class _FakeGraph:
    """Replays "out = 2 x + replays" into its static output, like a graph would."""

    def __init__(self, inputs):
        self.x, self.out, self.replays = inputs[0], torch.zeros(4), 0

    def replay(self):
        self.replays += 1
        time.sleep(0)  # let another thread in, as a replay on a GPU would
        self.out.copy_(self.x * 2 + self.replays)


class _NoOrder:
    def join(self):
        pass


def _graph_model(copy_outputs=True, guard=True, log=None, fail=False):
    """A GraphModel around a fake model and graph, already captured (unless ``fail``: its
    capture raises, at the second call)."""
    specs = manifests.specs({"name": "x", "shape": [4], "stride": [1], "dtype": "float32", "align": 16})
    graphs_made, runs = [], []

    def run(inputs):
        runs.append(inputs)
        return {"y": (inputs[0] * 2, None)}

    model = SimpleNamespace(name="m", variant="sm_90", device=CPU, weights=[], specs=specs, mutated=(), names=["x"],
                            batch_range=None,
                            input_check=make_input_check(specs, CPU, exact_layout=False) if guard else None,
                            kernels=[], state_buffers=None, run=run, context=1)

    def capturer(run, inputs, device, pool, state):
        if fail:
            raise RuntimeError("capture failed")
        graphs_made.append(_FakeGraph(inputs))
        return graphs_made[-1], {"y": (graphs_made[-1].out, None)}

    graph_model = GraphModel(model, copy_outputs, _NoOrder(), capturer=capturer)
    if log is not None:
        checked = graph_model.input_check

        def counting_guard(inputs):
            log.append("guard")
            return checked(inputs)

        graph_model.input_check = counting_guard
    if fail:
        return graph_model, runs
    graph_model.capture()
    return graph_model, graphs_made[0]


def test_graph_model_captures_at_the_second_call():
    model, runs = _graph_model(fail=True)
    x = torch.arange(4.0)
    assert torch.equal(model(x)["y"][0], x * 2) and len(runs) == 1  # op by op
    with pytest.warns(UserWarning, match="m: capturing the forward in a CUDA graph failed: capture failed"):
        assert torch.equal(model(x + 1)["y"][0], (x + 1) * 2)
    assert torch.equal(model(x + 2)["y"][0], (x + 2) * 2) and len(runs) == 3  # op by op from then on, no retry


def test_graph_model_first_call_builds_no_attention_plan(monkeypatch):
    """The call before the capture runs in ``ops.fresh_shapes()`` (cuDNN's attention plan is
    left to the capture); calls after a failed capture do not."""
    entered = []

    @contextlib.contextmanager
    def recording():
        entered.append(True)
        yield

    monkeypatch.setattr(graphs.ops, "fresh_shapes", recording)
    model, runs = _graph_model(fail=True)
    model(torch.arange(4.0))
    assert entered == [True]
    with pytest.warns(UserWarning, match="capture failed"):
        model(torch.arange(4.0))
    model(torch.arange(4.0))
    assert entered == [True] and len(runs) == 3


def test_graph_model_copies_any_layout():
    model, graph = _graph_model()
    x = torch.arange(8.0)[::2]  # strided: refused op by op, copied in here
    assert torch.equal(model(x)["y"][0], x * 2 + 1)
    assert torch.equal(model(x=x + 1)["y"][0], (x + 1) * 2 + 2)  # by name


def test_graph_model_keeps_outputs():
    model, graph = _graph_model()
    x = torch.arange(4.0)
    first = model(x)
    second = model(x + 1)
    assert list(first) == ["y"] and first["y"][1] is None
    assert torch.equal(first["y"][0], x * 2 + 1)  # kept: not overwritten by the next call
    assert torch.equal(second["y"][0], (x + 1) * 2 + 2)
    assert first["y"][0] is not graph.out and second["y"][0] is not graph.out


def test_graph_model_static_outputs():
    model, graph = _graph_model(copy_outputs=False)
    x = torch.arange(4.0)
    first = model(x)
    assert first["y"][0] is graph.out and torch.equal(first["y"][0], x * 2 + 1)
    model(x + 1)
    assert torch.equal(first["y"][0], (x + 1) * 2 + 2)  # valid until the next call only


def test_graph_model_static_inputs():
    log = []
    model, graph = _graph_model(log=log)
    static = model.static_inputs()
    assert static[0] is graph.x and static[0].data_ptr() % 16 == 0
    static[0].copy_(torch.arange(4.0))
    assert torch.equal(model(*static)["y"][0], torch.arange(4.0) * 2 + 1)
    assert log == []  # the static inputs themselves: no guard, no copy
    model(torch.ones(4))
    assert log == ["guard"] and torch.equal(static[0], torch.ones(4))


def test_graph_model_guards_before_copying():
    model, graph = _graph_model()
    model.static_inputs()[0].fill_(7)
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected shape \(4,\), got \(5,\)"):
        model(torch.ones(5))
    with pytest.raises(ValueError, match=r"expected 1 inputs \(x\), got 2"):
        model(torch.ones(4), torch.ones(4))
    assert graph.replays == 0 and torch.equal(model.static_inputs()[0], torch.full((4,), 7.0))


def test_graph_model_unchecked():
    model, graph = _graph_model(guard=False)
    out = model(torch.arange(4, dtype=torch.int64))  # no guard: the copy converts
    assert torch.equal(out["y"][0], torch.arange(4.0) * 2 + 1)


def test_graph_model_threads():
    model, graph = _graph_model()
    errors = []
    unflatten = model._unflatten

    def slow_unflatten(outputs):  # lets another thread in before the tree holds this call's slot
        time.sleep(0.0005)
        return unflatten(outputs)

    model._unflatten = slow_unflatten

    def worker(i):
        for j in range(100):
            x = torch.full((4,), float(1000 * i + j))
            replay = model(x)["y"][0] - 2 * x  # the replay number this call saw, unless calls mixed
            if not (1 <= replay[0] <= 200 and (replay == replay[0]).all()):
                errors.append((i, j, replay))

    run_threads(worker)
    assert not errors and graph.replays == 200


