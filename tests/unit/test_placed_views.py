"""An output that is a view of a buffer the program allocates (a padded LM head's logits) is written
in its output slot, around it, with no copy out: the slot holds the whole buffer there
(runtime/outputs.py ``OutputSlots``, ``Slot.rooms``) and the program allocates it there
(``placed_root``; codegen/program.py ``placed_roots``). On the CPU, with the program's kernels
stand-ins that write their whole buffer."""

import torch

from aotcombo.builder import graph as g
from aotcombo.builder.codegen import program as codegen_program
from aotcombo.builder.plan.combos import make_plan
from aotcombo.runtime.bound import _same
from aotcombo.runtime.ops import placed_root
from aotcombo.runtime.outputs import OutputSlots
from aotcombo.testing.graphs import Builder, pointwise

# The second output: rows of 250 of a [4, 256] buffer, from its third element (a padded head, shifted).
VIEW_SHAPE, VIEW_STRIDE, VIEW_OFFSET = (4, 250), (256, 1), 2


def _program():
    """forward(x) -> (first, view): ``first`` a buffer of its own (x + 1), then ``view`` of a buffer
    whose every element the second kernel writes (x * 2), the view's head and tail included."""
    b = Builder()
    x = b.input()
    first = b.launch(pointwise("plus_one", n=1024), [x])
    whole = b.launch(pointwise("twice", n=1024), [x])
    b.ops.append(g.View("logits", whole, g.TensorSpec(VIEW_SHAPE, VIEW_STRIDE, "float32", VIEW_OFFSET)))
    plan = make_plan(b.graph([first, "logits"]))
    source = codegen_program.render_program(plan, ("tuple", (("leaf",),) * 2), "demo")
    namespace = {"placed_root": placed_root}
    exec(compile(source.replace("from ._runtime.ops import placed_root", ""), "program", "exec"), namespace)

    def combo(x, first, whole, *_):  # the planner's one combo launch of the two kernels
        first.copy_(x + 1)
        whole.copy_(x * 2)

    assert len(plan.combos) == 1
    return source, lambda x, out=None: namespace["forward"]([combo], [], "cpu", x, aotcombo_out=out)


def _expected(x):
    return x + 1, torch.as_strided(x * 2, VIEW_SHAPE, VIEW_STRIDE, VIEW_OFFSET)


def test_the_program_allocates_the_viewed_buffer_around_its_output():
    source, forward = _program()
    assert "placed_root(aotcombo_out, 1, (1024,), (1,), 2, (256, 1), torch.float32, device)" in source
    x = torch.randn(1024)
    own = forward(x)  # no slot: the program's own buffers, as before
    slots = OutputSlots(list(own))
    assert slots.rooms == ((0, 1024), (VIEW_OFFSET, 1024))  # the second: its whole buffer, 2 before it
    slot = slots.slots[slots.free()]
    for t in slot:
        t.fill_(float("nan"))
    x = torch.randn(1024)
    first, view = forward(x, slot)
    want = _expected(x)
    assert first is slot[0] and _same(slot[1], view)  # both written in place: nothing to copy out
    assert torch.equal(slot[0], want[0]) and torch.equal(slot[1], want[1])  # the buffer's head spilt on nothing


def test_a_list_that_is_not_a_slot_gets_the_program_s_own_buffer():
    _, forward = _program()
    targets = [torch.zeros(1024), torch.zeros(VIEW_SHAPE[0] * VIEW_STRIDE[0]).as_strided(VIEW_SHAPE, VIEW_STRIDE)]
    x = torch.randn(1024)
    first, view = forward(x, targets)
    assert first is targets[0] and not _same(targets[1], view)  # the view: copied out by the caller
    assert torch.equal(view, _expected(x)[1])


def test_a_view_of_a_much_larger_buffer_has_its_slot_alone():
    small = torch.zeros(100_000)[:10]  # ten elements of a buffer of 100000: not held around them
    slots = OutputSlots([small])
    assert slots.rooms == ((0, 10),)
    slot = slots.slots[slots.free()]
    placed = placed_root(slot, 0, (100_000,), (1,), 0, (1,), torch.float32, "cpu")
    assert placed.data_ptr() != slot[0].data_ptr()  # a new buffer, not one past the slot
