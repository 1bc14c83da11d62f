"""The combo partition on synthetic graphs: independence, argument limit, tiling rank."""

import itertools

import pytest

from aotcombo import blocks, graph as g
from aotcombo.plan import MAX_ARGS, dependencies, levels, make_plan

F32 = "float32"


def pointwise(name, n=1024, inputs=1, outputs=1, y=None):
    params = [(f"in_ptr{i}", "*fp32") for i in range(inputs)] + [(f"out_ptr{i}", "*fp32") for i in range(outputs)]
    numels = [("y", y), ("x", n)] if y else [("x", n)]
    params += [(f"{k}numel", "i32") for k, _ in numels]
    params += [("YBLOCK", "constexpr")] if y else []
    params += [("XBLOCK", "constexpr")]
    return g.Kernel(
        name=name,
        source=f"@triton.jit\ndef {name}():\n    pass\n",
        heuristic="pointwise",
        signature=tuple(params),
        constants=(),
        divisible_by_16=(),
        numels=tuple(numels),
        reduction_hint=None,
        mutated=(),
    )


def reduction(name, x=64, r=512, persistent=True):
    params = [("in_ptr0", "*fp32"), ("out_ptr0", "*fp32"), ("xnumel", "i32"), ("r0_numel", "i32"), ("XBLOCK", "constexpr")]
    if not persistent:
        params.append(("R0_BLOCK", "constexpr"))
    return g.Kernel(
        name=name,
        source=f"@triton.jit\ndef {name}():\n    R0_BLOCK: tl.constexpr = {blocks.next_power_of_2(r)}\n"
        if persistent
        else f"@triton.jit\ndef {name}():\n    pass\n",
        heuristic="persistent_reduction" if persistent else "reduction",
        signature=tuple(params),
        constants=(),
        divisible_by_16=(),
        numels=(("x", x), ("r0_", r)),
        reduction_hint="INNER",
        mutated=(),
    )


def spec(n=1024):
    return g.TensorSpec((n,), (1,), F32)


class Builder:
    """Small DSL: inputs, allocations and launches with automatic names."""

    def __init__(self):
        self.inputs, self.ops, self.kernels = [], [], {}
        self.counter = itertools.count()

    def input(self):
        name = f"arg{len(self.inputs)}_1"
        self.inputs.append(g.Input(name, spec(), "user", len(self.inputs)))
        return name

    def launch(self, kernel, reads, writes=None, numels=None):
        self.kernels[kernel.name] = kernel
        outs = writes or []
        if writes is None:
            outs = [f"buf{next(self.counter)}" for _ in range(sum(p.startswith("out_ptr") for p, _ in kernel.signature))]
            for o in outs:
                self.ops.append(g.Alloc(o, spec()))
        args = [g.Ref(n) for n in list(reads) + list(outs)] + [v for _, v in kernel.numels]
        self.ops.append(g.Launch(kernel.name, tuple(args)))
        return outs[0] if len(outs) == 1 else outs

    def extern(self, a, b):
        out = f"buf{next(self.counter)}"
        self.ops.append(g.Alloc(out, spec()))
        self.ops.append(g.Extern("aten::mm.out", (g.Ref(a), g.Ref(b)), (("out", g.Ref(out)),), f"{out}_mm", (out,), (out,)))
        return out

    def graph(self, outputs):
        return g.Graph(90, tuple(self.inputs), tuple(self.ops), tuple(self.kernels.values()), tuple(outputs))


def launches_in(plan):
    return [[s.launch for s in c.subs] for c in plan.combos]


def assert_combos_independent(plan):
    """No combo holds two launches with a dependency path between them."""
    graph = plan.graph
    deps = dependencies(graph)
    index = {id(op): i for i, op in enumerate(graph.ops)}
    reach = []
    for i, mine in enumerate(deps):
        r = set(mine)
        for d in mine:
            r |= reach[d]
        reach.append(r)
    for combo in plan.combos:
        members = [index[id(s.launch)] for s in combo.subs]
        for a, b in itertools.permutations(members, 2):
            assert a not in reach[b], f"{combo.name}: op {b} depends on op {a}"


def test_independent_branches_share_one_combo():
    b = Builder()
    outs = [b.launch(pointwise(f"k{i}"), [b.input()]) for i in range(24)]
    plan = make_plan(b.graph(outs))
    assert len(plan.combos) == 1 and len(plan.combos[0].subs) == 24
    assert_combos_independent(plan)


def test_a_chain_is_never_combined():
    b = Builder()
    x = b.input()
    for i in range(5):
        x = b.launch(pointwise(f"k{i}"), [x])
    plan = make_plan(b.graph([x]))
    assert [len(c.subs) for c in plan.combos] == [1] * 5
    assert_combos_independent(plan)


def test_diamond_combines_the_two_middle_kernels_only():
    b = Builder()
    x = b.launch(pointwise("top"), [b.input()])
    left = b.launch(pointwise("left"), [x])
    right = b.launch(pointwise("right"), [x])
    out = b.launch(pointwise("bottom", inputs=2), [left, right])
    plan = make_plan(b.graph([out]))
    assert [sorted(s.kernel.name for s in c.subs) for c in plan.combos] == [["top"], ["left", "right"], ["bottom"]]
    assert_combos_independent(plan)


def test_extern_call_orders_kernels_around_it():
    b = Builder()
    x, w = b.input(), b.input()
    pre = b.launch(pointwise("pre"), [x])
    other = b.launch(pointwise("other"), [w])  # independent of the matmul chain
    mm = b.extern(pre, w)
    post = b.launch(pointwise("post"), [mm])
    plan = make_plan(b.graph([post, other]))
    names = [[s.kernel.name for s in c.subs] for c in plan.combos]
    assert names[0] == ["pre", "other"] and names[-1] == ["post"]
    order = [type(op).__name__ for op in plan.ops if not isinstance(op, g.Alloc)]
    assert order.index("Extern") > 0 and order.index("Extern") < len(order) - 1
    assert_combos_independent(plan)


def test_write_after_read_is_a_dependency():
    # k1 reads buf; k2 overwrites buf in place: k2 must not join k1.
    b = Builder()
    x = b.input()
    buf = b.launch(pointwise("make"), [x])
    b.launch(pointwise("reader"), [buf])
    inplace = g.Kernel(**{**pointwise("writer").__dict__, "signature": (("in_out_ptr0", "*fp32"), ("xnumel", "i32"), ("XBLOCK", "constexpr")), "mutated": ("in_out_ptr0",)})
    b.kernels[inplace.name] = inplace
    b.ops.append(g.Launch("writer", (g.Ref(buf), 1024)))
    plan = make_plan(b.graph([buf]))
    for combo in plan.combos:
        assert {"reader", "writer"} - {s.kernel.name for s in combo.subs}
    assert_combos_independent(plan)


def test_views_alias_their_base():
    b = Builder()
    x = b.input()
    buf = b.launch(pointwise("make"), [x])
    b.ops.append(g.View("view", buf, spec()))
    out = b.launch(pointwise("use_view"), ["view"])
    plan = make_plan(b.graph([out]))
    assert [len(c.subs) for c in plan.combos] == [1, 1]


def test_argument_limit_splits_combos():
    b = Builder()
    outs = [b.launch(pointwise(f"k{i}", inputs=3, outputs=2), [b.input(), b.input(), b.input()]) for i in range(60)]
    plan = make_plan(b.graph(outs))
    assert len(plan.combos) > 1
    assert all(len(c.params) <= MAX_ARGS for c in plan.combos)
    assert sum(len(c.subs) for c in plan.combos) == 60
    assert_combos_independent(plan)


def test_shared_inputs_count_once_against_the_limit():
    b = Builder()
    x = b.input()
    outs = [b.launch(pointwise(f"k{i}"), [x]) for i in range(200)]
    plan = make_plan(b.graph(outs))
    assert len(plan.combos) == 1 and len(plan.combos[0].params) == 201


def test_tiling_rank_is_consistent_within_a_combo():
    b = Builder()
    outs = [b.launch(pointwise(f"flat{i}"), [b.input()]) for i in range(3)]
    outs += [b.launch(pointwise(f"tiled{i}", n=64, y=64), [b.input()]) for i in range(3)]
    outs += [b.launch(reduction(f"red{i}"), [b.input()]) for i in range(3)]
    plan = make_plan(b.graph(outs))
    for combo in plan.combos:
        ranks = {sum(1 for k, _ in s.kernel.numels if not k.startswith("r")) for s in combo.subs}
        assert len(ranks) == 1
    assert len(plan.combos) == 2  # 1-D pointwise and reductions share; 2-D tiles apart


def test_long_reductions_are_kept_apart():
    b = Builder()
    outs = [b.launch(reduction(f"short{i}", r=512), [b.input()]) for i in range(2)]
    outs += [b.launch(reduction(f"long{i}", r=8192, persistent=False), [b.input()]) for i in range(2)]
    plan = make_plan(b.graph(outs))
    groups = sorted(sorted(s.kernel.name for s in c.subs) for c in plan.combos)
    assert groups == [["long0", "long1"], ["short0", "short1"]]


def test_combine_false_keeps_one_launch_per_kernel():
    b = Builder()
    outs = [b.launch(pointwise(f"k{i}"), [b.input()]) for i in range(4)]
    plan = make_plan(b.graph(outs), combine=False)
    assert [len(c.subs) for c in plan.combos] == [1, 1, 1, 1]


@pytest.mark.parametrize("requested, sizes, expected", [
    ("sequential", [1024] * 4, "sequential"),
    ("round_robin", [1024, 64], "round_robin"),
    ("auto", [4096] * 4, "round_robin"),
    ("auto", [65536, 1024], "sequential"),
])
def test_dispatch_rule(requested, sizes, expected):
    b = Builder()
    outs = [b.launch(pointwise(f"k{i}", n=n), [b.input()]) for i, n in enumerate(sizes)]
    plan = make_plan(b.graph(outs), dispatch=requested)
    assert plan.combos[0].dispatch == expected


def test_grid_is_the_sum_or_the_padded_max_of_programs():
    b = Builder()
    outs = [b.launch(pointwise(f"k{i}", n=n), [b.input()]) for i, n in enumerate([4096, 1024, 2048])]
    seq = make_plan(b.graph(outs), dispatch="sequential").combos[0]
    rr = make_plan(b.graph(outs), dispatch="round_robin").combos[0]
    assert seq.grid == 4 + 1 + 2
    assert rr.grid == 3 * 4


def test_levels_are_longest_paths():
    assert levels([set(), {0}, {0}, {1, 2}, set()]) == [0, 1, 1, 2, 0]


@pytest.mark.parametrize("kernel, expect", [
    (pointwise("p", n=100_000), {"XBLOCK": 1024}),
    (pointwise("small", n=100), {"XBLOCK": 128}),
    (pointwise("tile", n=1000, y=1000), {"XBLOCK": 64, "YBLOCK": 16}),
    (reduction("pr", x=4096, r=768), {"XBLOCK": 4}),
    (reduction("lr", x=64, r=100_000, persistent=False), {"XBLOCK": 1, "R0_BLOCK": 2048}),
])
def test_block_rules(kernel, expect):
    chosen = blocks.choose(kernel)
    assert dict(chosen.constexprs) == expect
    assert 1 <= chosen.num_warps <= 8
