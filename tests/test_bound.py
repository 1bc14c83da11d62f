"""Graphs bound to the caller's input addresses (runtime/bound.py), without a GPU: a fake
capture whose "graph" runs the captured function at each replay, so which graph a call
takes, which slot it writes and what the caller gets back are all checked on the CPU.
The GPU half is tests/test_gpu_call_path.py."""

import torch

from aotcombo.runtime.bound import MAX_GRAPHS, BoundGraphs, tensor_guard
from aotcombo.runtime.outputs import OutputSlots


class _Graph:
    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def replay(self):
        self.replays += 1
        self.fn()


def _bound(mutates=False, places=False):
    """A model ``y = 2 x + b`` (``b`` += 1 in place when ``mutates``; ``y`` written into the
    caller's tensor when ``places``), its static inputs and the BoundGraphs around it."""
    runs = []

    def run(inputs, out=None):
        x, b = inputs
        runs.append(out)
        if mutates:
            b.add_(1)
        return (torch.add(x * 2, b, out=out[0]) if out is not None else x * 2 + b, None)

    static = (torch.zeros(4), torch.zeros(4))
    slots = OutputSlots([torch.zeros(4)])
    captured = []

    def capture(fn):
        captured.append(_Graph(fn))
        return captured[-1]

    bound = BoundGraphs(run, static, [16, 16], slots, capture, tensor_guard(static), places)
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
        assert torch.equal(y, x * 2 + b) and (runs[-1] is not None) is places
        if places:
            assert runs[-1][0] is y  # the program wrote the slot itself: nothing copied


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
