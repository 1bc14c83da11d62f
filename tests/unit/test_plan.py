"""The combo partition on synthetic graphs: independence, argument limit, tiling rank."""

import itertools

import pytest

from aotcombo.builder.plan import blocks

from aotcombo.builder import graph as g
from aotcombo.builder.plan.combos import LARGE_POINTWISE, MAX_ARGS, make_plan
from aotcombo.builder.plan.dependencies import dependencies, levels
from aotcombo.errors import UnsupportedModelError
from aotcombo.testing.graphs import F32, Builder, pointwise, reduction, spec


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
    inplace = g.Kernel(**{**pointwise("writer").__dict__,
                          "signature": (("in_out_ptr0", "*fp32"), ("xnumel", "i32"), ("XBLOCK", "constexpr")),
                          "mutated": ("in_out_ptr0",)})
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
    plan = make_plan(b.graph([o for pair in outs for o in pair]))
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


def test_only_1d_pointwise_kernels_over_the_limit_run_alone():
    # Inductor's rule: a 1-D pointwise kernel over LARGE_POINTWISE elements gets its own
    # launch; a 2-D tile of as many elements does not (test_combo_kernel_yz_overflow).
    b = Builder()
    outs = [b.launch(pointwise("big_flat", n=LARGE_POINTWISE + 1), [b.input()]),
            b.launch(pointwise("small_flat"), [b.input()]),
            b.launch(pointwise("big_tile", n=44, y=5_793_280), [b.input()]),
            b.launch(pointwise("small_tile", n=34, y=1024), [b.input()])]
    plan = make_plan(b.graph(outs))
    groups = sorted(sorted(s.kernel.name for s in c.subs) for c in plan.combos)
    assert groups == [["big_flat"], ["big_tile", "small_tile"], ["small_flat"]]


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
    # Edges out of host ops (cost 0) add nothing: 0 -> 1 -> 2 with op 1 free.
    assert levels([set(), {0}, {1}, set()], [1, 0, 1, 1]) == [0, 1, 1, 0]


def test_host_ops_before_a_launch_do_not_delay_it():
    # A dynamic batch: the size of the input feeds a Scalar, the Scalar an allocation, the
    # allocation a kernel; that kernel is as independent of a static one as without them.
    b = Builder()
    x, y = b.input(), b.input()
    static = b.launch(pointwise("static"), [x])
    b.ops.append(g.Scalar("size", "size", (g.Ref(y), 0)))
    b.ops.append(g.Scalar("numel", "mul", (g.Ref("size"), 10)))
    b.ops.append(g.Alloc("dyn_out", g.TensorSpec((g.Ref("numel"),), (1,), F32)))
    b.kernels["dynamic"] = pointwise("dynamic")
    b.ops.append(g.Launch("dynamic", (g.Ref(y), g.Ref("dyn_out"), g.Ref("numel"))))
    plan = make_plan(b.graph([static, "dyn_out"]))
    assert [sorted(s.kernel.name for s in c.subs) for c in plan.combos] == [["dynamic", "static"]]
    assert_combos_independent(plan)
    # ...and the host ops it needs come before its combo.
    order = [getattr(op, "out", None) or getattr(op, "combo", None) for op in plan.ops]
    assert order.index("numel") < order.index("dyn_out") < order.index("combo_0")


def test_a_chain_through_host_ops_is_never_combined():
    b = Builder()
    x = b.launch(pointwise("make"), [b.input()])
    b.ops.append(g.View("v1", x, spec()))
    b.ops.append(g.View("v2", "v1", spec()))
    after_views = b.launch(pointwise("after_views"), ["v2"])
    direct = b.launch(pointwise("direct"), [x])
    plan = make_plan(b.graph([after_views, direct]))
    names = [sorted(s.kernel.name for s in c.subs) for c in plan.combos]
    assert names == [["make"], ["after_views", "direct"]]
    assert_combos_independent(plan)


@pytest.mark.parametrize("kernel, expect", [
    (pointwise("p", n=100_000), {"XBLOCK": 1024}),
    (pointwise("small", n=100), {"XBLOCK": 128}),
    (pointwise("tile", n=1000, y=1000), {"XBLOCK": 64, "YBLOCK": 16}),
    (reduction("pr", x=4096, r=768), {"XBLOCK": 1}),  # a row a program (blocks.PERSISTENT_ROW_A_PROGRAM)
    (reduction("pr_short", x=4096, r=256), {"XBLOCK": 16}),
    (reduction("pr_long", x=4096, r=2048), {"XBLOCK": 2}),
    (reduction("lr", x=64, r=100_000, persistent=False), {"XBLOCK": 1, "R0_BLOCK": 2048}),
])
def test_block_rules(kernel, expect):
    chosen = blocks.choose(kernel)
    assert dict(chosen.constexprs) == expect
    assert 1 <= chosen.num_warps <= 8
    if kernel.name == "pr":
        assert chosen.num_warps == 4 and chosen.programs == 4096


def _dynamic_row_reduction(block, mask=True):
    k = reduction("dyn_rows", x=1, r=32)
    source = f"@triton.jit\ndef dyn_rows():\n    R0_BLOCK: tl.constexpr = {block}\n"
    source += "    r0_mask = r0_index < r0_numel\n" if mask else ""
    return g.Kernel(**{**k.__dict__, "source": source, "dynamic_numels": ("r0_",)})


def test_a_persistent_reduction_over_the_dynamic_batch_needs_a_block_for_its_top():
    # numel r0_=32 is the top of the batch's range; Inductor fixed R0_BLOCK from it and masks
    # each row by r0_numel (PyTorch's test_dynamic_shapes_persistent_reduction_dynamic_rdim).
    assert blocks.choose(_dynamic_row_reduction(32)).axes == (1, 1, 1)
    with pytest.raises(UnsupportedModelError, match="sized for at most 16 of its up to 32"):
        blocks.choose(_dynamic_row_reduction(16))
    with pytest.raises(UnsupportedModelError, match=r"buckets instead of --dynamic \(--batch SIZES for the batch, "
                                                    r"--buckets AXIS=SIZES for another\)"):
        blocks.choose(_dynamic_row_reduction(32, mask=False))


def test_a_tiled_persistent_reduction_shares_its_rows_between_x_and_y():
    """MaxViT's window layer norms: Inductor tiles the rows of a persistent reduction over y
    (program_id(1)) and x (program_id(0)); x takes up to 16 of them, y the rest of the tile."""
    k = reduction("tiled", x=64, r=64)
    k = g.Kernel(**{**k.__dict__, "numels": (("y", 49), ("x", 64), ("r0_", 64)),
                    "signature": (("in_ptr0", "*fp32"), ("out_ptr0", "*fp32"), ("ynumel", "i32"), ("xnumel", "i32"),
                                  ("r0_numel", "i32"), ("YBLOCK", "constexpr"), ("XBLOCK", "constexpr"))})
    chosen = blocks.choose(k)
    assert dict(chosen.constexprs) == {"YBLOCK": 4, "XBLOCK": 16}  # 4 x 16 rows of 64: the 4096-element tile
    assert chosen.axes == (4, 13, 1)


def _fused_linear(name: str):
    """A kernel of ours with tensor-core tiles 16 x 32 x 256 in 3 stages: 48 kB of shared memory."""
    return g.Kernel(name=name, source=f"@triton.jit\ndef {name}():\n    pass\n", heuristic="matmul",
                    signature=(("x_ptr", "*fp16"), ("w_ptr", "*fp16"), ("out_ptr", "*fp16"), ("BLOCK_M", "constexpr"),
                               ("BLOCK_N", "constexpr"), ("BLOCK_K", "constexpr")),
                    constants=(), divisible_by_16=(), numels=(("m", 2), ("n", 1280), ("k", 1280)),
                    reduction_hint=None, mutated=(), family="fused_linear",
                    tiles=(("BLOCK_M", 16), ("BLOCK_N", 32), ("BLOCK_K", 256)), grid=(40, 1, 1), num_warps=4,
                    num_stages=3)


def test_tensor_core_kernels_of_one_level_share_a_combo_within_the_shared_memory_budget():
    """SD 1.5's UNet: 17 small linears of one level (each resnet's time embedding) in one combo asked
    for 720 kB of shared memory, more than any GPU has; each combo now stays within MAX_SHARED."""
    from aotcombo.builder.plan.combos import MAX_SHARED, shared_bytes

    b = Builder()
    x, w = b.input(), b.input()
    outs = [b.launch(_fused_linear(f"lin{i}"), [x, w]) for i in range(5)]
    plan = make_plan(b.graph(outs))
    assert shared_bytes(plan.combos[0].subs[0]) == 48 * 1024
    assert [len(c.subs) for c in plan.combos] == [2, 2, 1]
    assert all(sum(shared_bytes(s) for s in c.subs) <= MAX_SHARED for c in plan.combos)
    assert_combos_independent(plan)


def test_a_kernel_over_its_archs_shared_memory_is_a_build_error():
    """Compiled binaries are checked against their arch's shared memory at build time, so a
    package never fails at load with CUDA_ERROR_INVALID_VALUE from cuFuncSetAttribute."""
    from types import SimpleNamespace

    from aotcombo.builder.compile.jobs import MAX_SHARED_BYTES, Jobs
    from aotcombo.errors import BuildError

    def jobs(shared: int) -> Jobs:
        binary = SimpleNamespace(arch=90, shared=shared)
        return Jobs(SimpleNamespace(finish=lambda: {"sm_90/combo_10": binary}))

    assert jobs(MAX_SHARED_BYTES[90]).finish()
    with pytest.raises(BuildError, match=r"sm_90/combo_10 takes 737280 bytes of shared memory; sm_90 has 232448"):
        jobs(737280).finish()
