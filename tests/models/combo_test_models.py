"""Every case of PyTorch's ``test/inductor/test_combo_kernels.py`` as an aotcombo model.

Ported from pytorch/pytorch at commit 00960f7fe5ae7ac488588f637a82588437983439 (the newest
version the search index holds). ``PYTORCH_TESTS`` lists every test method of that file, in
file order (parametrized ones under the names ``instantiate_parametrized_tests`` gives them);
each is either mapped to a case of ``CASES`` (its ``tests``) or listed in ``NOT_PORTED`` with
the reason. Several PyTorch tests compile the same function on the same inputs and differ only
in Inductor config (benchmarking, per-sub-kernel blocks, PDL, metadata): they share one case.

A case is a model and an inputs factory ``inputs(seed)``: fresh random tensors for every seed,
of the shapes, dtypes and strides the PyTorch test uses (``seed=None``: uninitialized tensors of
those shapes, for a build that only needs shapes). ``small``: the same model on smaller inputs,
for the correctness check under Triton's CPU interpreter where the real size is too big for it
(the real size is kept for the launch count: it decides the partition). ``dynamic=(min, max)``:
built with a dynamic batch (``inputs(seed, batch)`` makes the inputs at a batch size; the
inputs whose dim 0 follows it are batched), the nearest aotcombo has to the dynamic-shape tests.

Kept in a Python registry rather than files under ``sample_models/``: fifty small models are
lambdas of two to six lines each, the test and the table script import them directly, and the
build cache fingerprints them the same way (``tests/coverage_models.py`` does the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

COMMIT = "00960f7fe5ae7ac488588f637a82588437983439"
SOURCE = "test/inductor/test_combo_kernels.py"

# Class groups: a subclass that only flips ``combo_kernel_per_subkernel_blocks`` runs the same
# methods on the same models (aotcombo always keeps each sub-kernel's own block sizes).
A = "ComboKernelTests(+PerSubkernelBlocks)"
B = "ComboKernelBenchmarkTests(+PerSubkernelBlocks)"
D = "ComboKernelDynamicShapesTests(+PerSubkernelBlocks)"
PDL = "ComboKernelPDLTests"
MAX = "ComboKernelTestsMaxAutotune"
META = "ComboKernelMetadataTests"
PEAK = "ComboKernelPeakMemoryTests"

PYTORCH_TESTS = tuple(f"{cls}::{name}" for cls, names in (
    (A, """test_activation_functions test_reduce_functions test_mutated_args test_reduce_split
        test_2d_blocking_partitioning test_persistent_reduction_size_hint
        test_combo_kernel_tma_descriptor_block_name test_sort_in_combo_kernel_forces_persistent_reduction
        test_fuse_mix_order_reductions_combo_kernels test_combo_kernel_scalar_store_broadcast
        test_single_combo_kernels_benchmark_combo_kernel_False test_single_combo_kernels_benchmark_combo_kernel_True
        test_combo_kernel_per_config_subkernel_poi test_combo_kernel_per_config_subkernel_per
        test_combo_kernel_per_config_subkernel_red_per test_combo_kernel_per_config_subkernel_red
        test_combo_kernel_per_config_subkernel_r0_r1 test_combo_kernel_per_config_subkernel_poi_3d
        test_combo_kernel_per_config_subkernel_block_size test_combo_kernel_dynamic_shapes_grid_changes
        test_combo_kernels_pointwise_only_pointwise_only_False_expected_kernel_count_2
        test_combo_kernels_pointwise_only_pointwise_only_True_expected_kernel_count_3
        test_combo_kernel_max_num_nodes_max_num_nodes_8_expected_kernel_count_1
        test_combo_kernel_max_num_nodes_max_num_nodes_3_expected_kernel_count_2
        test_combo_kernel_max_num_nodes_max_num_nodes_2_expected_kernel_count_3
        test_combo_kernel_amd_special_config_args_max_autotune_False
        test_combo_kernel_amd_special_config_args_max_autotune_True
        test_combo_kernel_yz_overflow test_combo_kernel_no_bench_stitched_config
        test_combo_kernel_no_bench_persistent_reduction test_combo_kernel_no_bench_carve_out
        test_combo_kernel_split_large_reductions test_combo_kernel_dynamic_scale_rblock"""),
    (B, """test_activation_benchmark test_reduce_benchmark test_mutated_benchmark test_round_robin_dispatch
        test_2d_blocking_benchmark test_persistent_reduction_no_x_dim"""),
    (D, """test_dynamic_shapes_activations test_dynamic_shapes_2d_blocking test_dynamic_shapes_reduce
        test_dynamic_shapes_mutated test_dynamic_shapes_activations_no_autotune
        test_dynamic_shapes_persistent_reduction_no_x_dim test_dynamic_shapes_persistent_reduction_no_x_dim_2
        test_dynamic_shapes_2d_blocking_round_robin test_dynamic_shapes_persistent_reduction_mixed_x_dim_cuda
        test_dynamic_shapes_persistent_reduction_mixed_x_dim_xpu test_helper_fn_defined
        test_dynamic_shapes_persistent_reduction_dynamic_rdim"""),
    (PDL, "test_pdl_codegen_in_combo_kernel test_pdl_combo_kernel_pointwise test_pdl_combo_kernel_reduction"),
    (MAX, """test_combo_kernel_max_autotune test_combo_kernel_max_autotune_with_reduction
        test_combo_autotune_many_subkernels test_combo_kernel_per_subkernel_reduction_hint
        test_combo_autotune_grouping test_combo_autotune_grouping_by_metadata_fingerprint
        test_combo_max_persistent_rblock_gated_on_per_subkernel_per_subkernel_True
        test_combo_max_persistent_rblock_gated_on_per_subkernel_per_subkernel_False
        test_combo_kernel_coordesc_tunes_largest_subkernel_first"""),
    (META, """test_combo_inductor_meta_has_optimize_mem test_combo_inductor_meta_optimize_mem_false_in_training_forward
        test_combo_triton_meta_has_disable_ftz_disable_ftz_False test_combo_triton_meta_has_disable_ftz_disable_ftz_True
        test_combo_pointwise_combo_grid_meta_has_per_subkernel_fields
        test_combo_reduction_combo_grid_meta_has_per_subkernel_fields
        test_combo_reduction_deterministic_has_contiguous_rdim_per_subkernel
        test_combo_per_kernel_inductor_meta_matches_standalone
        test_combo_kernel_num_gb_and_flop_match_standalone_sum
        test_combo_inductor_meta_has_kernel_num_gb_under_profile_bandwidth
        test_combo_inductor_meta_no_kernel_num_gb_without_profile
        test_combo_rms_norm_forwards_add_persistent_rblock test_benchmark_combo_kernel_emits_real_num_gb"""),
    (PEAK, """test_threshold_gating test_region_carry_in_uses_post_free_boundary
        test_combo_kernel_peak_memory_wide_resnet test_estimate_region_peak_memory"""),
) for name in names.split())


NOT_PORTED = {
    f"{MAX}::test_combo_autotune_grouping_by_metadata_fingerprint":
        "compiles no model: calls Inductor's _handle_combo_kernel_per_subkernel_blocks on hand-written "
        "combo metadata to check how autotuning groups sub-kernels; aotcombo does not autotune",
    f"{PEAK}::test_threshold_gating":
        "compiles no model: drives Scheduler._try_combo_with_memory_check with fake scheduler nodes",
    f"{PEAK}::test_region_carry_in_uses_post_free_boundary":
        "compiles no model: drives Scheduler._try_combo_with_memory_check with fake scheduler nodes",
    f"{PEAK}::test_estimate_region_peak_memory":
        "compiles no model: a unit test of torch._inductor.memory.estimate_region_peak_memory on fake nodes",
}


# --- inputs ----------------------------------------------------------------------------


class Draw:
    """Random tensors from one seeded generator; ``seed=None``: uninitialized tensors."""

    def __init__(self, seed: int | None):
        self.g = None if seed is None else torch.Generator().manual_seed(seed)

    def rand(self, *shape, dtype=torch.float32):
        if self.g is None:
            return torch.empty(shape, dtype=dtype)
        return torch.rand(shape, generator=self.g).to(dtype)

    def randn(self, *shape, dtype=torch.float32):
        if self.g is None:
            return torch.empty(shape, dtype=dtype)
        return torch.randn(shape, generator=self.g).to(dtype)

    def randint(self, low, high, shape, dtype=torch.int64):
        if self.g is None:
            return torch.empty(shape, dtype=dtype)
        return torch.randint(low, high, shape, generator=self.g, dtype=dtype)

    def mask(self, *shape):
        if self.g is None:
            return torch.empty(shape, dtype=torch.bool)
        return torch.rand(shape, generator=self.g) > 0.5


class Fn(nn.Module):
    """A module running ``fn`` (PyTorch's tests compile plain functions)."""

    def __init__(self, fn, **attrs):
        super().__init__()
        self.fn = fn
        for k, v in attrs.items():
            setattr(self, k, v)

    def forward(self, *xs):
        return self.fn(*xs)


@dataclass(frozen=True)
class Case:
    model: Callable[[], nn.Module]
    inputs: Callable[..., tuple]  # inputs(seed) (dynamic: inputs(seed, batch))
    tests: tuple[str, ...]  # the PyTorch tests it comes from
    small: Callable[[int | None], tuple] | None = None  # interpreter-sized inputs, when the real ones are too big
    small_model: Callable[[], nn.Module] | None = None  # the model for ``small``, when it differs
    dynamic: tuple[int, int] | None = None  # (min, max) of a dynamic batch
    check_batches: tuple[int, ...] = ()  # batch sizes the interpreter checks a dynamic build at
    slow: bool = False
    note: str = ""
    blocked: str = ""  # the build is known to fail for this reason (a bug tracked elsewhere)


def fn_case(fn, inputs, tests, **kw) -> Case:
    return Case(model=lambda: Fn(fn), inputs=inputs, tests=tuple(tests), **kw)


# --- the models ----------------------------------------------------------------------------


def activations(a, b, c):
    return F.relu(a), torch.sigmoid(b), torch.tanh(c)


def reduce_fns(a, b, c, d):
    return torch.sum(a, dim=0), torch.max(b, dim=0), torch.min(c, dim=0), torch.tanh(d)


def mutated(a, b, c, d):
    a.add_(1)
    b.sigmoid_()
    c = torch.add(c, 5)
    d.tanh_()
    return a, b, c, d


def reduce_split(a, b):
    return torch.linalg.vector_norm(a), torch.sum(b, dim=0)


def add3(a0, a1, a2, b0, b1, b2):
    return torch.add(a0, b0), torch.add(a1, b1), torch.add(a2, b2)


def max_min_rows(x, y):
    return x.max(1), y.min(1)


def row_sums(*xs):
    return tuple(x.sum(dim=-1) for x in xs)


def sort_tanh(a, b, c, d):
    return (torch.sort(a, dim=1).values, torch.sort(b, dim=1).values, torch.sort(c, dim=1).values, torch.tanh(d))


def mix_order(x, y, z):
    row_sum = x.sum(dim=1)
    col_sum = x.sum(dim=0)
    return row_sum.sum(), col_sum, y.sum(), z.sum()


def scalar_store_broadcast(a, b, c, d):
    scalar_sum = a + b
    return scalar_sum, c.sum(dim=1), (d * scalar_sum).sum()


def add_one_each(a, b):
    return torch.add(a, 1), torch.add(b, 1)


def mul2_add1(a, b):
    return a * 2.0, b + 1.0


def sums_0_2(a, b):
    return a.sum(dim=(0, 2)), b.sum(dim=(0, 2))


def sums_1_2(a, b):
    return a.sum(dim=(1, 2)), b.sum(dim=(1, 2))


def add1_mul2(a, b):
    return a + 1.0, b * 2.0


def channels_last(*ts):
    return tuple(t.contiguous(memory_format=torch.channels_last) for t in ts)


def sin_cos(x, y):
    return x.sin(), y.cos()


def pointwise_and_reductions(a, b, c, d):
    return a * 2.0, b + 1.0, c.sum(dim=-1), d.mean(dim=-1)


def six_pointwise(a, b, c, d, e, f):
    return a * 2.0, b + 1.0, c.sin(), d.cos(), e.exp(), f.neg()


def yz_overflow(a, b):
    a_view = a.permute(0, 2, 1).clone(memory_format=torch.contiguous_format).view(-1, a.shape[1])
    b_view = b.permute(0, 2, 1).clone(memory_format=torch.contiguous_format).view(-1, b.shape[1])
    return a_view, b_view


def three_pointwise(a, b, c):
    return a * 2.0, b + 1.0, c - 1.0


def bucketize_carve_out(a, b, c, boundaries):
    return torch.bucketize(a, boundaries), b * 2.0, c + 1.0


def silu_add_sums(a, b, c, d):
    return (a * torch.sigmoid(a) + b).sum(dim=1), (c * torch.sigmoid(c) + d).sum(dim=1)


def sums_dim1(x, y):
    return x.sum(1), y.sum(1)


def sums_dim2(x, y):
    return x.sum(2), y.sum(2)


def sum_mean_max(x, y, z):
    return x.sum(1), y.mean(1), z.max(1)


def sum_mean_cumsum(x, y, z):
    return x.sum(1), y.mean(1), z.cumsum(1)


def full_sums(a, b):
    return a.sum(), b.sum()


def relu_sigmoid(a, b):
    return torch.relu(a), torch.sigmoid(b)


def relu_sigmoid_tanh(a, b, c):
    return torch.relu(a), torch.sigmoid(b), torch.tanh(c)


def sum_mean_rows(x, y):
    return x.sum(dim=-1), y.mean(dim=-1)


def inner_outer(x, y):
    return x.sum(dim=-1), y.sum(dim=0)


def cos_sin_exp_neg(a, b, c, d):
    return a.cos(), b.sin(), c.exp(), d.neg()


def _rms_norm(x, w, eps=1e-6):
    v = x.pow(2).mean(-1, keepdim=True)
    return w * x * torch.rsqrt(v + eps)


def rms_norm_pair(a, wa, b, wb):
    return _rms_norm(a, wa), _rms_norm(b, wb)


class SplitLargeReductions(nn.Module):
    """test_combo_kernel_split_large_reductions: a squeezenet1_1 backward fragment (max-pool
    offsets to indices, scatter_add into a zero buffer, two masked sums over [0, 2, 3]),
    written as a forward; ``n`` is the batch (512 in PyTorch's test)."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def forward(self, getitem_54, arg33_1, arg61_1, full, arg62_1):
        import torch._inductor.inductor_prims  # noqa: F401 - registers prims._low_memory_max_pool_*

        n = self.n
        full_default = torch.ops.aten.full.default([n * 128, 3025], 0, dtype=torch.float32, device=getitem_54.device)
        view_default = torch.ops.aten.view.default(getitem_54, [n * 128, 729])
        idx = torch.ops.prims._low_memory_max_pool_offsets_to_indices.default(
            arg33_1, [3, 3], [55, 55], [2, 2], [0, 0], [1, 1])
        view_default_1 = torch.ops.aten.view.default(idx, [n * 128, 729])
        scatter_add = torch.ops.aten.scatter_add.default(full_default, 1, view_default_1, view_default)
        view_default_2 = torch.ops.aten.view.default(scatter_add, [n, 128, 55, 55])
        s0 = torch.ops.aten.slice.Tensor(view_default_2, 1, 0, 64)
        s1 = torch.ops.aten.slice.Tensor(view_default_2, 1, 64, 128)
        r0 = torch.ops.aten.sum.dim_IntList(torch.ops.aten.where.self(arg61_1, full, s1), [0, 2, 3])
        r1 = torch.ops.aten.sum.dim_IntList(torch.ops.aten.where.self(arg62_1, full, s0), [0, 2, 3])
        return r0, r1


def _split_large_inputs(n):
    def make(seed):
        d = Draw(seed)
        return (d.randn(n, 128, 27, 27), d.randint(0, 9, (n, 128, 27, 27), dtype=torch.int8),
                d.mask(n, 64, 55, 55), d.randn(), d.mask(n, 64, 55, 55))
    return make


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_ch, mid_ch, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, mid_ch, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid_ch)
        self.conv2 = nn.Conv2d(mid_ch, mid_ch, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid_ch)
        self.conv3 = nn.Conv2d(mid_ch, mid_ch * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(mid_ch * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class WideResNetLike(nn.Module):
    """ComboKernelPeakMemoryTests._make_wide_resnet_like (blocks per layer: 3, 4, 20)."""

    def __init__(self, blocks=(3, 4, 20)):
        super().__init__()

        def make_layer(in_ch, mid_ch, n, stride=1):
            downsample = nn.Sequential(nn.Conv2d(in_ch, mid_ch * 4, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(mid_ch * 4))
            layers = [_Bottleneck(in_ch, mid_ch, stride, downsample)]
            layers += [_Bottleneck(mid_ch * 4, mid_ch) for _ in range(1, n)]
            return nn.Sequential(*layers)

        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = make_layer(64, 128, blocks[0])
        self.layer2 = make_layer(512, 256, blocks[1], stride=2)
        self.layer3 = make_layer(1024, 512, blocks[2], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.avgpool(x).flatten(1))


def _wide_resnet(blocks=(3, 4, 20)):
    torch.manual_seed(0)
    model = WideResNetLike(blocks)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # trained-looking batch-norm statistics, so eval mode is not the identity
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.25)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


def _shapes(*shapes, kind="rand"):
    """inputs(seed) drawing one tensor per shape."""
    def make(seed):
        d = Draw(seed)
        return tuple(getattr(d, kind)(*s) for s in shapes)
    return make


# --- the registry ------------------------------------------------------------------------------

CASES: dict[str, Case] = {}


def _add(name, case):
    assert name not in CASES, name
    CASES[name] = case


_add("activations", fn_case(
    activations, _shapes((10, 10), (20, 20), (10, 10)),
    [f"{A}::test_activation_functions", f"{B}::test_activation_benchmark", f"{PDL}::test_pdl_combo_kernel_pointwise"],
    note="benchmark_combo_kernel and PDL change how Inductor tunes and launches, not which kernels it combines"))
_add("activations_dynamic", fn_case(
    activations, lambda seed, batch=10: (lambda d: (d.rand(batch, 10), d.rand(20, 20), d.rand(batch, 10)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_activations", f"{D}::test_dynamic_shapes_activations_no_autotune"],
    dynamic=(1, 64), check_batches=(3, 10, 64),
    note="dynamic batch on dim 0 of a and c (PyTorch makes every dim dynamic; aotcombo has one batch dim)"))
_add("reduce", fn_case(
    reduce_fns, _shapes((10, 10), (20, 20), (10, 10), (30, 8)),
    [f"{A}::test_reduce_functions", f"{B}::test_reduce_benchmark"]))
_add("reduce_dynamic", fn_case(
    reduce_fns,
    lambda seed, batch=10: (lambda d: (d.rand(batch, 10), d.rand(20, 20), d.rand(batch, 10),
                                       d.rand(30, 8)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_reduce"], dynamic=(1, 64), check_batches=(3, 10, 64),
    note="dynamic batch on dim 0 of a and c: the sums over dim 0 reduce over the batch"))
_add("mutated", fn_case(
    mutated, _shapes((10, 10), (20, 20), (10, 10), (30, 8)),
    [f"{A}::test_mutated_args", f"{B}::test_mutated_benchmark"],
    note="a, b, d are updated in the caller's tensors, as in eager"))
_add("mutated_round_robin", fn_case(
    mutated, _shapes((10, 10), (20, 5), (10, 10), (5, 18)), [f"{B}::test_round_robin_dispatch"]))
_add("mutated_round_robin_dynamic", fn_case(
    mutated,
    lambda seed, batch=10: (lambda d: (d.rand(batch, 10), d.rand(20, 5), d.rand(batch, 10), d.rand(5, 18)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_mutated"], dynamic=(1, 64), check_batches=(3, 10, 64),
    note="dynamic batch on dim 0 of a and c"))
_add("reduce_split", fn_case(
    reduce_split, _shapes((2048, 512), (20, 20)), [f"{A}::test_reduce_split"]))


def _blocking_2d(seed, batch=30):
    d = Draw(seed)
    return (d.rand(batch, 20), d.rand(40, 30), d.rand(36, 40), d.rand(batch, 20), d.rand(30, 40).t(),
            d.rand(40, 36).t())


_add("blocking_2d", fn_case(
    add3, _blocking_2d,
    [f"{A}::test_2d_blocking_partitioning", f"{B}::test_2d_blocking_benchmark"],
    note="b1, b2 are transposed views: the two adds reading them are 2D-tiled"))
_add("blocking_2d_dynamic", fn_case(
    add3, _blocking_2d, [f"{D}::test_dynamic_shapes_2d_blocking"], dynamic=(1, 64), check_batches=(5, 30, 64),
    note="dynamic batch on dim 0 of a0 and b0"))


def _blocking_2d_rr(seed, batch=20):
    d = Draw(seed)
    return (d.rand(batch, 30), d.rand(30, 30), d.rand(40, 32), d.rand(30, batch).t(), d.rand(30, 30).t(),
            d.rand(32, 40).t())


_add("blocking_2d_round_robin_dynamic", fn_case(
    add3, _blocking_2d_rr, [f"{D}::test_dynamic_shapes_2d_blocking_round_robin"], dynamic=(1, 64),
    check_batches=(20, 24, 64),
    note="dynamic batch on dim 0 of a0 and of the transposed b0 (PyTorch's second call also grows a1, a2, b1, b2)"))
_add("persistent_size_hint", fn_case(
    max_min_rows, _shapes((768, 16), (768, 32)), [f"{A}::test_persistent_reduction_size_hint"]))
_add("row_sums_1024x128_256", fn_case(
    row_sums, _shapes((1024, 128), (1024, 256), kind="randn"), [f"{A}::test_combo_kernel_tma_descriptor_block_name"],
    note="PyTorch's test turns on triton.use_tensor_descriptor (TMA); aotcombo traces with Inductor's defaults"))


def _sort_inputs(seed):
    d = Draw(seed)
    return (d.randint(0, 1000, (10, 200)), d.randint(0, 1000, (20, 200)), d.randint(0, 1000, (10, 200)), d.rand(30, 8))


_add("sort_tanh", fn_case(
    sort_tanh, _sort_inputs, [f"{A}::test_sort_in_combo_kernel_forces_persistent_reduction"],
    note="PyTorch's test patches Inductor to force looped (non-persistent) sorts; aotcombo traces with the defaults"))
_add("mix_order_reductions", fn_case(
    mix_order, _shapes((8192, 1024), (2048,), (2048,)), [f"{A}::test_fuse_mix_order_reductions_combo_kernels"],
    slow=True))


def _scalar_inputs(seed):
    d = Draw(seed)
    return d.randn(), d.randn(), d.randn(2048, 2048), d.randn(2048, 1)


_add("scalar_store_broadcast", fn_case(
    scalar_store_broadcast, _scalar_inputs, [f"{A}::test_combo_kernel_scalar_store_broadcast"]))
_add("large_pointwise", fn_case(
    add_one_each, _shapes((8192, 8192), (100, 100)),
    [f"{A}::test_single_combo_kernels_benchmark_combo_kernel_False",
     f"{A}::test_single_combo_kernels_benchmark_combo_kernel_True"],
    small=_shapes((1024, 1024), (100, 100)), slow=True,
    note="8192x8192 (67M elements) is over the 51.2M large-pointwise limit, so it runs alone; "
         "the interpreter checks a 1024x1024 build"))
_add("per_config_poi", fn_case(
    mul2_add1, _shapes((512,), (524288,), kind="randn"), [f"{A}::test_combo_kernel_per_config_subkernel_poi"]))
_add("per_config_per", fn_case(
    row_sums, _shapes((1024, 64), (1024, 512), kind="randn"), [f"{A}::test_combo_kernel_per_config_subkernel_per"]))
_add("per_config_red_per", fn_case(
    row_sums, _shapes((512, 128), (256, 2048), kind="randn"), [f"{A}::test_combo_kernel_per_config_subkernel_red_per"]))
_add("per_config_red", fn_case(
    sums_0_2, _shapes((32, 64, 128), (32, 64, 128), kind="randn"),
    [f"{A}::test_combo_kernel_per_config_subkernel_red"]))


def _r0_r1_inputs(seed):
    d = Draw(seed)
    return d.randn(32, 16, 64).permute(1, 0, 2), d.randn(32, 16, 64).permute(1, 0, 2)


_add("per_config_r0_r1", fn_case(
    sums_1_2, _r0_r1_inputs, [f"{A}::test_combo_kernel_per_config_subkernel_r0_r1"],
    note="PyTorch's test sets triton.prefer_nd_tiling and tile_reductions (2D r0_/r1_ reductions); "
         "aotcombo traces with Inductor's defaults"))


def _poi_3d_inputs(seed):
    d = Draw(seed)
    return d.randn(16, 16, 16)[:8, :8, :8], d.randn(16, 16, 16)[:8, :8, :8]


_add("per_config_poi_3d", fn_case(
    add1_mul2, _poi_3d_inputs, [f"{A}::test_combo_kernel_per_config_subkernel_poi_3d"],
    note="PyTorch's test sets triton.prefer_nd_tiling and max_tiles=3 (x, y, z tiles); "
         "aotcombo traces with Inductor's defaults"))
_add("channels_last_block_size", fn_case(
    channels_last,
    _shapes((4, 3, 224, 224), (64, 3, 3, 3), (64, 64, 3, 3), (128, 64, 3, 3), (128, 128, 3, 3), (256, 128, 3, 3),
            (256, 256, 3, 3), (256, 256, 3, 3), kind="randn"),
    [f"{A}::test_combo_kernel_per_config_subkernel_block_size"]))
_add("sin_cos_dynamic", fn_case(
    sin_cos, lambda seed, batch=1024: (lambda d: (d.randn(batch, 512), d.randn(2048, 256)))(Draw(seed)),
    [f"{A}::test_combo_kernel_dynamic_shapes_grid_changes"], dynamic=(1, 2048), check_batches=(512, 1024),
    note="dynamic batch on dim 0 of x (PyTorch's second call also changes dim 1 and y)"))
_add("pointwise_and_reductions", fn_case(
    pointwise_and_reductions, _shapes((1024,), (1024,), (32, 1024), (32, 1024)),
    [f"{A}::test_combo_kernels_pointwise_only_pointwise_only_False_expected_kernel_count_2",
     f"{A}::test_combo_kernels_pointwise_only_pointwise_only_True_expected_kernel_count_3"],
    note="compared with Inductor's defaults (combo_kernels_pointwise_only=False)"))
_add("six_pointwise_1024", fn_case(
    six_pointwise, _shapes(*[(1024,)] * 6),
    [f"{A}::test_combo_kernel_max_num_nodes_max_num_nodes_8_expected_kernel_count_1",
     f"{A}::test_combo_kernel_max_num_nodes_max_num_nodes_3_expected_kernel_count_2",
     f"{A}::test_combo_kernel_max_num_nodes_max_num_nodes_2_expected_kernel_count_3"],
    note="compared with Inductor's defaults (combo_kernel_max_num_nodes=8)"))
_add("mul2_add1_1024", fn_case(
    mul2_add1, _shapes((1024,), (1024,)),
    [f"{A}::test_combo_kernel_amd_special_config_args_max_autotune_False",
     f"{A}::test_combo_kernel_amd_special_config_args_max_autotune_True"],
    note="ROCm-only in PyTorch (HIP compile options); the model is ported for CUDA"))
_add("yz_overflow", fn_case(
    yz_overflow, _shapes((4800, 34, 256), (22630, 44, 256)), [f"{A}::test_combo_kernel_yz_overflow"],
    small=_shapes((48, 34, 256), (226, 44, 256)), slow=True,
    note="255M + 42M elements (a 45260-high y grid in Inductor); the interpreter checks 48x34x256 and 226x44x256"))
_add("three_pointwise_256", fn_case(
    three_pointwise, _shapes((256,), (256,), (256,)), [f"{A}::test_combo_kernel_no_bench_stitched_config"]))
_add("three_row_sums_64x1024", fn_case(
    row_sums, _shapes((64, 1024), (64, 1024), (64, 1024), kind="randn"),
    [f"{A}::test_combo_kernel_no_bench_persistent_reduction"]))


def _bucketize_inputs(seed):
    d = Draw(seed)
    boundaries = d.rand(3).sort().values if seed is not None else torch.empty(3)
    return d.rand(1024), d.rand(1024), d.rand(1024), boundaries


_add("bucketize_carve_out", fn_case(
    bucketize_carve_out, _bucketize_inputs, [f"{A}::test_combo_kernel_no_bench_carve_out"],
    note="boundaries are fresh sorted random numbers (PyTorch: 0.25, 0.5, 0.75)"))
_add("split_large_reductions", Case(
    model=lambda: SplitLargeReductions(512), inputs=_split_large_inputs(512),
    tests=(f"{A}::test_combo_kernel_split_large_reductions",),
    small=_split_large_inputs(2), small_model=lambda: SplitLargeReductions(2), slow=True,
    note="batch 512: two sums of 512x64x55x55 (99M elements each); the interpreter checks batch 2. "
         "Inductor keeps the two very large reductions apart (co-fusing them was a performance regression in "
         "squeezenet1_1's backward); aotcombo combines them, each with the fixed blocks it has alone: "
         "not yet timed on a GPU"))
_add("silu_add_sums_8192x2560", fn_case(
    silu_add_sums, _shapes(*[(8192, 2560)] * 4, kind="randn"), [f"{A}::test_combo_kernel_dynamic_scale_rblock"],
    small=_shapes(*[(64, 2560)] * 4, kind="randn"), slow=True,
    note="2560-wide rows: long reductions; the interpreter checks 64 rows"))
_add("sums_dim1_dynamic", fn_case(
    sums_dim1, lambda seed, batch=16: (lambda d: (d.rand(batch, 256), d.rand(32, 256)))(Draw(seed)),
    [f"{B}::test_persistent_reduction_no_x_dim", f"{D}::test_dynamic_shapes_persistent_reduction_no_x_dim"],
    dynamic=(1, 256), check_batches=(1, 16, 256),
    note="dynamic batch on dim 0 of x (PyTorch marks dim 0 of x and of y dynamic, separately)"))
_add("sums_dim2_dynamic", fn_case(
    sums_dim2, lambda seed, batch=8: (lambda d: (d.rand(batch, 16, 256), d.rand(batch, 32, 256)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_persistent_reduction_no_x_dim_2"], dynamic=(1, 256), check_batches=(1, 8, 256),
    note="dynamic batch on dim 0 of x and y (PyTorch also makes dim 1 dynamic)"))
_add("sum_mean_max_dynamic", fn_case(
    sum_mean_max,
    lambda seed, batch=32: (lambda d: (d.rand(16, 128), d.rand(batch, 128), d.rand(batch, 256)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_persistent_reduction_mixed_x_dim_cuda",
     f"{D}::test_dynamic_shapes_persistent_reduction_mixed_x_dim_xpu"],
    dynamic=(1, 256), check_batches=(1, 32, 256),
    note="dynamic batch on dim 0 of y and z (PyTorch marks dim 0 of x, y and z dynamic, separately); "
         "the _xpu test is the same model on XPU"))
_add("sum_mean_cumsum", fn_case(
    sum_mean_cumsum, _shapes((16, 128), (32, 128), (32, 256)), [f"{D}::test_helper_fn_defined"],
    note="PyTorch checks a scan helper is defined once in the combo; static shapes here"))
_add("full_sums_dynamic", fn_case(
    full_sums, lambda seed, batch=16: (lambda d: (d.randn(batch), d.randn(batch)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_persistent_reduction_dynamic_rdim"], dynamic=(1, 32), check_batches=(1, 16, 32),
    note="the batch is the reduced dim, up to 32 (PyTorch: torch._check(a.shape[0] <= 32)): Inductor sizes "
         "the persistent block for 32"))
_add("relu_sigmoid_1024", fn_case(
    relu_sigmoid, _shapes((1024,), (1024,)),
    [f"{PDL}::test_pdl_codegen_in_combo_kernel", f"{META}::test_combo_inductor_meta_has_optimize_mem",
     f"{META}::test_combo_inductor_meta_optimize_mem_false_in_training_forward",
     f"{META}::test_combo_triton_meta_has_disable_ftz_disable_ftz_False",
     f"{META}::test_combo_triton_meta_has_disable_ftz_disable_ftz_True",
     f"{META}::test_combo_per_kernel_inductor_meta_matches_standalone",
     f"{META}::test_combo_kernel_num_gb_and_flop_match_standalone_sum",
     f"{META}::test_combo_inductor_meta_has_kernel_num_gb_under_profile_bandwidth",
     f"{META}::test_combo_inductor_meta_no_kernel_num_gb_without_profile",
     f"{META}::test_benchmark_combo_kernel_emits_real_num_gb"],
    note="the metadata tests check Inductor's generated source for fields aotcombo does not emit; "
         "the training-forward one uses requires_grad inputs (aotcombo packages inference)"))
_add("sum_mean_32x1024", fn_case(
    sum_mean_rows, _shapes((32, 1024), (32, 1024)),
    [f"{PDL}::test_pdl_combo_kernel_reduction",
     f"{META}::test_combo_reduction_combo_grid_meta_has_per_subkernel_fields",
     f"{META}::test_combo_reduction_deterministic_has_contiguous_rdim_per_subkernel"]))
_add("activations_max_autotune", fn_case(
    activations, _shapes((32, 1024), (64, 512), (16, 2048)), [f"{MAX}::test_combo_kernel_max_autotune"],
    note="aotcombo never autotunes: block sizes are fixed rules"))
_add("sum_mean_128x256", fn_case(
    sum_mean_rows, _shapes((128, 256), (128, 256)), [f"{MAX}::test_combo_kernel_max_autotune_with_reduction"]))
_add("six_pointwise_mixed", fn_case(
    six_pointwise, _shapes((8, 8192), (128, 64), (16, 4096), (512, 16), (32, 2048), (256, 32)),
    [f"{MAX}::test_combo_autotune_many_subkernels"]))
_add("inner_outer_128x256", fn_case(
    inner_outer, _shapes((128, 256), (128, 256)), [f"{MAX}::test_combo_kernel_per_subkernel_reduction_hint"]))
_add("cos_sin_exp_neg", fn_case(
    cos_sin_exp_neg, _shapes((4, 65536), (4, 65536), (4, 8), (4, 8)), [f"{MAX}::test_combo_autotune_grouping"]))
_add("row_sums_32x256_1024", fn_case(
    row_sums, _shapes((32, 256), (32, 1024)),
    [f"{MAX}::test_combo_max_persistent_rblock_gated_on_per_subkernel_per_subkernel_True",
     f"{MAX}::test_combo_max_persistent_rblock_gated_on_per_subkernel_per_subkernel_False"]))
_add("activations_coordesc", fn_case(
    activations, _shapes((32, 1024), (256, 256), (16, 128)),
    [f"{MAX}::test_combo_kernel_coordesc_tunes_largest_subkernel_first"]))
_add("relu_sigmoid_tanh_1024", fn_case(
    relu_sigmoid_tanh, _shapes((1024,), (1024,), (1024,)),
    [f"{META}::test_combo_pointwise_combo_grid_meta_has_per_subkernel_fields"]))
_add("rms_norm_pair", fn_case(
    rms_norm_pair, _shapes((2048, 4096), (4096,), (2048, 4096), (4096,)),
    [f"{META}::test_combo_rms_norm_forwards_add_persistent_rblock"],
    small=_shapes((64, 4096), (4096,), (64, 4096), (4096,)), slow=True,
    note="4096-wide rows; the interpreter checks 64 rows"))
_add("wide_resnet", Case(
    model=_wide_resnet, inputs=_shapes((1, 3, 224, 224), kind="randn"),
    tests=(f"{PEAK}::test_combo_kernel_peak_memory_wide_resnet",), slow=True,
    small=_shapes((1, 3, 64, 64), kind="randn"), small_model=lambda: _wide_resnet((1, 1, 2)),
    note="PyTorch compares peak memory under combo_kernel_peak_memory_* gates; here: launches and outputs. "
         "The interpreter checks 1, 1, 2 blocks per layer on a 64x64 image (the whole model: 7 minutes)"))


def case_of(test: str) -> str | None:
    for name, case in CASES.items():
        if test in case.tests:
            return name
    return None
