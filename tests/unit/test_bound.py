"""Graphs bound to the caller's input addresses (runtime/bound.py), without a GPU: a fake
capture whose "graph" runs the captured function at each replay, so which graph a call
takes, which slot it writes and what the caller gets back are all checked on the CPU,
with each guard: the C one (runtime/_guard.c, compiled here) and torch's TensorGuards.
The GPU half is tests/gpu/test_gpu_call_path.py."""

import pytest
import torch

from aotcombo.runtime import torch_private
from aotcombo.runtime.bound import MAX_GRAPHS, BoundGraphs, PointerSets, bound_guard
from aotcombo.runtime.outputs import OutputSlots


@pytest.fixture(autouse=True, params=["C guard", "TensorGuards"])
def guard_kind(request, monkeypatch):
    """Every test runs with the C guard and with TensorGuards (as in the pure wheel)."""
    if request.param == "C guard":
        from aotcombo.testing.native import compiled

        monkeypatch.setattr(torch_private, "_guard", compiled("_guard"))
    else:
        monkeypatch.setattr(torch_private, "_guard", None)
    return request.param


def test_the_guard_is_the_one_asked_for(guard_kind):
    guard = bound_guard((torch.zeros(4), torch.zeros(4)))
    assert isinstance(guard, PointerSets) == (guard_kind == "TensorGuards")


class _Graph:
    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def replay(self):
        self.replays += 1
        self.fn()


def _layout(tensors):
    return [(t.data_ptr(), t.shape, t.stride(), t.dtype) for t in tensors]


class _FixedGraph(_Graph):
    """A graph as CUDA's: it reads the addresses and layouts its inputs had when it was captured.
    A replay after an input moved or changed layout would read stale memory: it fails the test."""

    def __init__(self, fn, runs):
        super().__init__(fn)
        fn()  # the capture runs the forward once: ``runs`` records its inputs
        self.inputs = runs[-1][1]
        self.layout = _layout(self.inputs)

    def replay(self):
        assert _layout(self.inputs) == self.layout, "a graph replayed on inputs that moved or changed layout"
        super().replay()


def _bound(mutates=False, places=False, fixed=False):
    """A model ``y = 2 x + b`` (``b`` += 1 in place when ``mutates``; ``y`` written into the
    caller's tensor when ``places``), its static inputs and the BoundGraphs around it."""
    runs = []

    def run(inputs, out=None):
        x, b = inputs
        runs.append((out, inputs))
        if mutates:
            b.add_(1)
        return (torch.add(x * 2, b, out=out[0]) if out is not None else x * 2 + b, None)

    static = (torch.zeros(4), torch.zeros(4))
    slots = OutputSlots([torch.zeros(4)])
    captured = []

    def capture(fn):
        captured.append(_FixedGraph(fn, runs) if fixed else _Graph(fn))
        return captured[-1]

    bound = BoundGraphs(run, static, [16, 16], slots, capture, bound_guard(static), places)
    return bound, static, captured, runs


def test_addresses_are_bound_at_their_second_call():
    bound, static, captured, _ = _bound()
    x, b = torch.randn(4), torch.randn(4)
    assert bound.accepts((x, b)) and bound.replay((x, b)) is None and captured == []  # first: the main graph's
    y = bound.replay((x, b))[0]  # second: captured, replayed
    assert len(captured) == 1 and torch.equal(y, x * 2 + b)
    x.copy_(torch.randn(4))  # new values at the same addresses: no new capture
    z = bound.replay((x, b))[0]
    assert len(captured) == 2 and torch.equal(z, x * 2 + b)  # y still held: the other slot's graph
    assert torch.equal(y, y) and z.data_ptr() != y.data_ptr()
    del y
    x.copy_(torch.randn(4))
    w = bound.replay((x, b))[0]
    assert len(captured) == 2 and torch.equal(w, x * 2 + b)  # slot 0 free again: its graph
    assert bound.replay(static) is None and bound.replay(static) is None  # the static inputs: never bound


def test_outputs_are_written_into_the_slot_where_the_program_can():
    for places in (False, True):
        bound, _, _, runs = _bound(places=places)
        x, b = torch.randn(4), torch.randn(4)
        bound.replay((x, b))
        y = bound.replay((x, b))[0]
        assert torch.equal(y, x * 2 + b) and (runs[-1][0] is not None) is places
        if places:
            assert runs[-1][0][0] is y  # the program wrote the slot itself: nothing copied


def test_a_held_output_is_never_overwritten():
    bound, _, captured, _ = _bound()
    x, b = torch.randn(4), torch.randn(4)
    bound.replay((x, b))
    kept = bound.replay((x, b))[0]
    x.copy_(torch.randn(4))
    view = bound.replay((x, b))[0][1:]
    expected = [kept.clone(), view.clone()]
    x.copy_(torch.randn(4))
    assert bound.replay((x, b)) is None  # the caller holds a tensor of one slot and a view of the other
    assert torch.equal(kept, expected[0]) and torch.equal(view, expected[1])


def test_mutated_inputs_are_updated_in_place():
    bound, _, _, runs = _bound(mutates=True)
    x, b = torch.randn(4), torch.zeros(4)
    bound.replay((x, b))  # first call: not bound (the main graph would run it)
    for step in range(1, 4):
        y = bound.replay((x, b))[0]
        assert torch.equal(b, torch.full((4,), float(step))) and torch.equal(y, x * 2 + step)


def test_only_aligned_known_layouts_are_bound():
    bound, _, captured, _ = _bound()
    assert not bound.accepts((torch.randn(4, 1), torch.randn(4)))  # shape
    assert not bound.accepts((torch.randn(4).half(), torch.randn(4)))  # dtype
    assert not bound.accepts((torch.randn(8)[::2], torch.randn(4)))  # strides
    assert not bound.accepts((torch.randn(4),)) and not bound.accepts((torch.randn(4), 3))
    with torch.inference_mode():
        made_here = (torch.randn(4), torch.randn(4))
    assert bound.accepts(made_here)
    misaligned = (torch.randn(5)[1:], torch.randn(4))
    assert bound.accepts(misaligned)  # TensorGuards does not look at addresses ...
    assert bound.replay(misaligned) is None and bound.replay(misaligned) is None and captured == []  # ... we do


def test_at_most_max_graphs():
    bound, _, captured, _ = _bound()
    inputs = [(torch.randn(4), torch.randn(4)) for _ in range(MAX_GRAPHS + 4)]
    for pair in inputs + inputs:
        bound.replay(pair)
    assert len(captured) == len(bound) == MAX_GRAPHS
    y = bound.replay(inputs[-1])  # past the limit: the main graph's path
    assert y is None


def _changes():
    """In-place changes of a tensor's storage or layout: those that bump its version counter, and
    ``.data =`` and ``swap_tensors``, which do not."""
    yield "resize_ larger", lambda x: x.resize_(64)
    yield "resize_ and back", lambda x: x.resize_(1 << 16).resize_(4)
    yield "resize_ smaller", lambda x: x.resize_(2)
    yield "set_ another storage", lambda x: x.set_(torch.randn(4))
    yield "set_ the same storage, another layout", lambda x: x.set_(x.untyped_storage(), 0, (2, 2), (1, 2))
    yield "as_strided_", lambda x: x.as_strided_((2,), (2,))
    yield "unsqueeze_", lambda x: x.unsqueeze_(0)
    yield ".data = another tensor", lambda x: setattr(x, "data", torch.randn(4))
    yield ".data = a view of itself", lambda x: setattr(x, "data", x.view(2, 2))
    yield ".data = another dtype", lambda x: setattr(x, "data", x.view(torch.int32))
    yield "swap_tensors", lambda x: torch.utils.swap_tensors(x, torch.randn(4))


@pytest.mark.parametrize("change", [c for _, c in _changes()], ids=[n for n, _ in _changes()])
def test_inputs_changed_in_place_are_never_read_at_their_old_place(change):
    """The same tensor objects, changed in place between calls: a call takes the main graph's
    path or a graph bound to where and how they are now, never the graph of where they were
    (nothing is skipped for the same objects: ``.data =`` and ``swap_tensors`` change a tensor
    without its version counter)."""
    bound, _, captured, _ = _bound(fixed=True)
    x, b = torch.randn(4), torch.randn(4)
    for _ in range(3):
        y = bound.replay((x, b))
    assert len(captured) == 1 and torch.equal(y[0], x * 2 + b)
    change(x)
    for _ in range(3):
        if bound.accepts((x, b)):
            y = bound.replay((x, b))
            assert y is None or torch.equal(y[0], x * 2 + b)  # _FixedGraph fails a stale replay


def test_normal_and_inference_tensors_alternate():
    bound, _, captured, _ = _bound()
    x, b = torch.randn(4), torch.randn(4)
    with torch.inference_mode():
        xi, bi = torch.randn(4), torch.randn(4)
    for _ in range(3):
        for pair in ((x, b), (xi, bi)):
            assert bound.accepts(pair)
            y = bound.replay(pair)
            assert y is None or torch.equal(y[0], pair[0] * 2 + pair[1])
    assert len(captured) == 2


def test_a_new_address_set_on_a_slot_takes_its_own_graph():
    """The graph of a slot's last replay is tried first; other addresses look theirs up."""
    bound, _, captured, _ = _bound(fixed=True)
    first, second = (torch.randn(4), torch.randn(4)), (torch.randn(4), torch.randn(4))
    for _ in range(3):
        for pair in (first, second):
            y = bound.replay(pair)
            assert y is None or torch.equal(y[0], pair[0] * 2 + pair[1])
    assert len(captured) == 2 and captured[0].inputs is not captured[1].inputs


def test_static_outputs_are_the_one_slot_of_copy_outputs_false():
    """With ``copy_outputs=False`` a bound graph writes the main graph's own outputs: every
    replay hands out the same tensors, whoever holds them."""
    from aotcombo.runtime.outputs import StaticOutputs

    static_out = [torch.zeros(4)]

    def run(inputs, out=None):
        x, b = inputs
        return (torch.add(x * 2, b, out=out[0]) if out is not None else x * 2 + b, None)

    static = (torch.zeros(4), torch.zeros(4))
    captured = []
    bound = BoundGraphs(run, static, [16, 16], StaticOutputs(static_out),
                        lambda fn: captured.append(_Graph(fn)) or captured[-1], bound_guard(static), True)
    pairs = [(torch.randn(4), torch.randn(4)) for _ in range(2)]
    for pair in pairs:
        assert bound.replay(pair) is None  # first sight: the main graph's path
    for _ in range(2):
        for x, b in pairs:
            y = bound.replay((x, b))
            assert y is static_out and torch.equal(y[0], x * 2 + b)
    assert len(captured) == 2
