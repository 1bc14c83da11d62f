"""Buffers' lifetimes in the per-call program (plan/memory.py): allocations made at their
first use, names released after their last, the call's peak memory the live set's."""

import ast

import torch

from aotcombo.builder import graph as g
from aotcombo.builder.codegen import program as codegen_program
from aotcombo.builder.plan.combos import make_plan
from aotcombo.builder.plan.memory import peak_bytes
from aotcombo.testing.graphs import Builder, pointwise

BUFFER = 1024 * 4  # the builder's buffers: 1024 float32


def chain(layers: int, residual: bool = False):
    """``layers`` kernels one after another; ``residual``: the last also reads the first's output."""
    b = Builder()
    first = x = b.launch(pointwise("k0"), [b.input()])
    for i in range(1, layers):
        reads = [x, first] if residual and i == layers - 1 else [x]
        x = b.launch(pointwise(f"k{i}", inputs=len(reads)), reads)
    return make_plan(b.graph([x]))


def released_after_use(source: str) -> list[str]:
    """The names forward reads after it deleted them (none, when the releases are right)."""
    forward = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    dead, wrong = set(), []
    for statement in forward.body:
        if isinstance(statement, ast.Delete):
            dead |= {t.id for t in statement.targets}
            continue
        wrong += [n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and n.id in dead]
        dead -= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return wrong


def test_a_chain_holds_two_buffers_at_once_not_one_per_layer():
    plan = chain(12)
    # every buffer of the chain would be live at the end if none were released: 12 of them
    assert peak_bytes(plan.graph, list(plan.call_ops), set(plan.graph.outputs)) == 2 * BUFFER
    source = codegen_program.render_program(plan, ("leaf",), "demo")
    assert source.count("del ") == 11 and not released_after_use(source)
    # each allocation comes right before the launch that writes it, not all at the start
    body = [line.strip() for line in source.split("def forward")[1].splitlines()]
    allocations = [i for i, line in enumerate(body) if "empty_strided" in line]
    assert all(body[i + 1].startswith("kernels[") for i in allocations)


def test_a_buffer_read_again_later_lives_until_then():
    plan = chain(6, residual=True)
    assert peak_bytes(plan.graph, list(plan.call_ops), set(plan.graph.outputs)) == 3 * BUFFER
    source = codegen_program.render_program(plan, ("leaf",), "demo")
    assert not released_after_use(source)
    forward = source.split("def forward")[1]
    assert forward.index("del buf0") > forward.index("kernels[5](")


def test_the_program_with_releases_computes_the_same():
    plan = chain(8, residual=True)
    source = codegen_program.render_program(plan, ("leaf",), "demo")
    namespace = {}
    exec(compile(source, "program", "exec"), namespace)

    def add_one(*args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        *reads, out = tensors
        out.copy_(sum(reads) + 1)

    x = torch.randn(1024)
    y = namespace["forward"]([add_one] * len(plan.combos), [], "cpu", x)
    expected = x + 1
    first = expected
    for i in range(1, 8):
        expected = expected + (first if i == 7 else 0) + 1
    assert torch.equal(y, expected)


def test_views_keep_their_storage_and_dynamic_sizes_count_at_the_largest():
    b = Builder()
    x = b.input()
    n = "n"
    b.ops.append(g.Scalar(n, "size", (g.Ref(x), 0)))
    b.ops.append(g.Alloc("big", g.TensorSpec((g.Ref(n), 8), (8, 1), "float32")))
    b.ops.append(g.View("half", "big", g.TensorSpec((g.Ref(n), 4), (8, 1), "float32")))
    out = b.launch(pointwise("k"), ["half"])
    graph = g.replace(b.graph([out]), inputs=(g.Input(x, g.TensorSpec(("batch",), (1,), "float32"), "user", 0),))
    plan = make_plan(graph)
    # "big" (batch x 8 float32, 32 x 8 at the largest batch) lives as long as its view is read
    assert peak_bytes(plan.graph, list(plan.call_ops), set(plan.graph.outputs), {"batch": 32}) == 32 * 8 * 4 + BUFFER
