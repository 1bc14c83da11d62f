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
build cache fingerprints them the same way (``tests/models/coverage_models.py`` does the same).

This module is the registry: the PyTorch tests and the case each maps to. The models live
beside it by family (``combo_pointwise_models``, ``combo_reduction_models``,
``combo_network_models``), ``Case`` and the inputs' parts in ``combo_case``; like this module,
each loads by path (``aotcombo.testing.corpora``).
"""

from __future__ import annotations

from aotcombo.testing.corpora import load

# Loaded by path, as the corpus loads: once loaded, each module is in sys.modules under its
# name, where the imports below find it.
for _module in ("combo_case", "combo_pointwise_models", "combo_reduction_models", "combo_network_models"):
    load(_module)

from combo_case import Case, Draw, fn_case, shapes  # noqa: E402
from combo_network_models import SplitLargeReductions, split_large_inputs, wide_resnet  # noqa: E402
from combo_pointwise_models import (  # noqa: E402
    activations, add1_mul2, add3, add_one_each, blocking_2d_inputs, blocking_2d_round_robin_inputs, bucketize_carve_out,
    bucketize_inputs, channels_last, cos_sin_exp_neg, mul2_add1, mutated, poi_3d_inputs, relu_sigmoid,
    relu_sigmoid_tanh, sin_cos, six_pointwise, three_pointwise, yz_overflow)
from combo_reduction_models import (  # noqa: E402
    full_sums, inner_outer, max_min_rows, mix_order, pointwise_and_reductions, r0_r1_inputs, reduce_fns,
    reduce_split, rms_norm_pair, row_sums, scalar_inputs, scalar_store_broadcast, silu_add_sums, sort_inputs,
    sort_tanh, sum_mean_cumsum, sum_mean_max, sum_mean_rows, sums_0_2, sums_1_2, sums_dim1, sums_dim2)

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


# --- the registry ------------------------------------------------------------------------------

CASES: dict[str, Case] = {}


def _add(name, case):
    assert name not in CASES, name
    CASES[name] = case


_add("activations", fn_case(
    activations, shapes((10, 10), (20, 20), (10, 10)),
    [f"{A}::test_activation_functions", f"{B}::test_activation_benchmark", f"{PDL}::test_pdl_combo_kernel_pointwise"],
    note="benchmark_combo_kernel and PDL change how Inductor tunes and launches, not which kernels it combines"))
_add("activations_dynamic", fn_case(
    activations, lambda seed, batch=10: (lambda d: (d.rand(batch, 10), d.rand(20, 20), d.rand(batch, 10)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_activations", f"{D}::test_dynamic_shapes_activations_no_autotune"],
    dynamic=(1, 64), check_batches=(3, 10, 64),
    note="dynamic batch on dim 0 of a and c (PyTorch makes every dim dynamic; aotcombo has one batch dim)"))
_add("reduce", fn_case(
    reduce_fns, shapes((10, 10), (20, 20), (10, 10), (30, 8)),
    [f"{A}::test_reduce_functions", f"{B}::test_reduce_benchmark"]))
_add("reduce_dynamic", fn_case(
    reduce_fns,
    lambda seed, batch=10: (lambda d: (d.rand(batch, 10), d.rand(20, 20), d.rand(batch, 10),
                                       d.rand(30, 8)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_reduce"], dynamic=(1, 64), check_batches=(3, 10, 64),
    note="dynamic batch on dim 0 of a and c: the sums over dim 0 reduce over the batch"))
_add("mutated", fn_case(
    mutated, shapes((10, 10), (20, 20), (10, 10), (30, 8)),
    [f"{A}::test_mutated_args", f"{B}::test_mutated_benchmark"],
    note="a, b, d are updated in the caller's tensors, as in eager"))
_add("mutated_round_robin", fn_case(
    mutated, shapes((10, 10), (20, 5), (10, 10), (5, 18)), [f"{B}::test_round_robin_dispatch"]))
_add("mutated_round_robin_dynamic", fn_case(
    mutated,
    lambda seed, batch=10: (lambda d: (d.rand(batch, 10), d.rand(20, 5), d.rand(batch, 10), d.rand(5, 18)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_mutated"], dynamic=(1, 64), check_batches=(3, 10, 64),
    note="dynamic batch on dim 0 of a and c"))
_add("reduce_split", fn_case(
    reduce_split, shapes((2048, 512), (20, 20)), [f"{A}::test_reduce_split"]))
_add("blocking_2d", fn_case(
    add3, blocking_2d_inputs,
    [f"{A}::test_2d_blocking_partitioning", f"{B}::test_2d_blocking_benchmark"],
    note="b1, b2 are transposed views: the two adds reading them are 2D-tiled"))
_add("blocking_2d_dynamic", fn_case(
    add3, blocking_2d_inputs, [f"{D}::test_dynamic_shapes_2d_blocking"], dynamic=(1, 64), check_batches=(5, 30, 64),
    note="dynamic batch on dim 0 of a0 and b0"))
_add("blocking_2d_round_robin_dynamic", fn_case(
    add3, blocking_2d_round_robin_inputs, [f"{D}::test_dynamic_shapes_2d_blocking_round_robin"], dynamic=(1, 64),
    check_batches=(20, 24, 64),
    note="dynamic batch on dim 0 of a0 and of the transposed b0 (PyTorch's second call also grows a1, a2, b1, b2)"))
_add("persistent_size_hint", fn_case(
    max_min_rows, shapes((768, 16), (768, 32)), [f"{A}::test_persistent_reduction_size_hint"]))
_add("row_sums_1024x128_256", fn_case(
    row_sums, shapes((1024, 128), (1024, 256), kind="randn"), [f"{A}::test_combo_kernel_tma_descriptor_block_name"],
    note="PyTorch's test turns on triton.use_tensor_descriptor (TMA); aotcombo traces with Inductor's defaults"))
_add("sort_tanh", fn_case(
    sort_tanh, sort_inputs, [f"{A}::test_sort_in_combo_kernel_forces_persistent_reduction"],
    note="PyTorch's test patches Inductor to force looped (non-persistent) sorts; aotcombo traces with the defaults"))
_add("mix_order_reductions", fn_case(
    mix_order, shapes((8192, 1024), (2048,), (2048,)), [f"{A}::test_fuse_mix_order_reductions_combo_kernels"],
    slow=True))
_add("scalar_store_broadcast", fn_case(
    scalar_store_broadcast, scalar_inputs, [f"{A}::test_combo_kernel_scalar_store_broadcast"]))
_add("large_pointwise", fn_case(
    add_one_each, shapes((8192, 8192), (100, 100)),
    [f"{A}::test_single_combo_kernels_benchmark_combo_kernel_False",
     f"{A}::test_single_combo_kernels_benchmark_combo_kernel_True"],
    small=shapes((1024, 1024), (100, 100)), slow=True,
    note="8192x8192 (67M elements) is over the 51.2M large-pointwise limit, so it runs alone; "
         "the interpreter checks a 1024x1024 build"))
_add("per_config_poi", fn_case(
    mul2_add1, shapes((512,), (524288,), kind="randn"), [f"{A}::test_combo_kernel_per_config_subkernel_poi"]))
_add("per_config_per", fn_case(
    row_sums, shapes((1024, 64), (1024, 512), kind="randn"), [f"{A}::test_combo_kernel_per_config_subkernel_per"]))
_add("per_config_red_per", fn_case(
    row_sums, shapes((512, 128), (256, 2048), kind="randn"), [f"{A}::test_combo_kernel_per_config_subkernel_red_per"]))
_add("per_config_red", fn_case(
    sums_0_2, shapes((32, 64, 128), (32, 64, 128), kind="randn"),
    [f"{A}::test_combo_kernel_per_config_subkernel_red"]))
_add("per_config_r0_r1", fn_case(
    sums_1_2, r0_r1_inputs, [f"{A}::test_combo_kernel_per_config_subkernel_r0_r1"],
    note="PyTorch's test sets triton.prefer_nd_tiling and tile_reductions (2D r0_/r1_ reductions); "
         "aotcombo traces with Inductor's defaults"))
_add("per_config_poi_3d", fn_case(
    add1_mul2, poi_3d_inputs, [f"{A}::test_combo_kernel_per_config_subkernel_poi_3d"],
    note="PyTorch's test sets triton.prefer_nd_tiling and max_tiles=3 (x, y, z tiles); "
         "aotcombo traces with Inductor's defaults"))
_add("channels_last_block_size", fn_case(
    channels_last,
    shapes((4, 3, 224, 224), (64, 3, 3, 3), (64, 64, 3, 3), (128, 64, 3, 3), (128, 128, 3, 3), (256, 128, 3, 3),
            (256, 256, 3, 3), (256, 256, 3, 3), kind="randn"),
    [f"{A}::test_combo_kernel_per_config_subkernel_block_size"]))
_add("sin_cos_dynamic", fn_case(
    sin_cos, lambda seed, batch=1024: (lambda d: (d.randn(batch, 512), d.randn(2048, 256)))(Draw(seed)),
    [f"{A}::test_combo_kernel_dynamic_shapes_grid_changes"], dynamic=(1, 2048), check_batches=(512, 1024),
    note="dynamic batch on dim 0 of x (PyTorch's second call also changes dim 1 and y)"))
_add("pointwise_and_reductions", fn_case(
    pointwise_and_reductions, shapes((1024,), (1024,), (32, 1024), (32, 1024)),
    [f"{A}::test_combo_kernels_pointwise_only_pointwise_only_False_expected_kernel_count_2",
     f"{A}::test_combo_kernels_pointwise_only_pointwise_only_True_expected_kernel_count_3"],
    note="compared with Inductor's defaults (combo_kernels_pointwise_only=False)"))
_add("six_pointwise_1024", fn_case(
    six_pointwise, shapes(*[(1024,)] * 6),
    [f"{A}::test_combo_kernel_max_num_nodes_max_num_nodes_8_expected_kernel_count_1",
     f"{A}::test_combo_kernel_max_num_nodes_max_num_nodes_3_expected_kernel_count_2",
     f"{A}::test_combo_kernel_max_num_nodes_max_num_nodes_2_expected_kernel_count_3"],
    note="compared with Inductor's defaults (combo_kernel_max_num_nodes=8)"))
_add("mul2_add1_1024", fn_case(
    mul2_add1, shapes((1024,), (1024,)),
    [f"{A}::test_combo_kernel_amd_special_config_args_max_autotune_False",
     f"{A}::test_combo_kernel_amd_special_config_args_max_autotune_True"],
    note="ROCm-only in PyTorch (HIP compile options); the model is ported for CUDA"))
_add("yz_overflow", fn_case(
    yz_overflow, shapes((4800, 34, 256), (22630, 44, 256)), [f"{A}::test_combo_kernel_yz_overflow"],
    small=shapes((48, 34, 256), (226, 44, 256)), slow=True,
    note="255M + 42M elements (a 45260-high y grid in Inductor); the interpreter checks 48x34x256 and 226x44x256"))
_add("three_pointwise_256", fn_case(
    three_pointwise, shapes((256,), (256,), (256,)), [f"{A}::test_combo_kernel_no_bench_stitched_config"]))
_add("three_row_sums_64x1024", fn_case(
    row_sums, shapes((64, 1024), (64, 1024), (64, 1024), kind="randn"),
    [f"{A}::test_combo_kernel_no_bench_persistent_reduction"]))
_add("bucketize_carve_out", fn_case(
    bucketize_carve_out, bucketize_inputs, [f"{A}::test_combo_kernel_no_bench_carve_out"],
    note="boundaries are fresh sorted random numbers (PyTorch: 0.25, 0.5, 0.75)"))
_add("split_large_reductions", Case(
    model=lambda: SplitLargeReductions(512), inputs=split_large_inputs(512),
    tests=(f"{A}::test_combo_kernel_split_large_reductions",),
    small=split_large_inputs(2), small_model=lambda: SplitLargeReductions(2), slow=True,
    note="batch 512: two sums of 512x64x55x55 (99M elements each); the interpreter checks batch 2. "
         "Inductor keeps the two very large reductions apart (co-fusing them was a performance regression in "
         "squeezenet1_1's backward); aotcombo combines them, each with the fixed blocks it has alone: "
         "not yet timed on a GPU"))
_add("silu_add_sums_8192x2560", fn_case(
    silu_add_sums, shapes(*[(8192, 2560)] * 4, kind="randn"), [f"{A}::test_combo_kernel_dynamic_scale_rblock"],
    small=shapes(*[(64, 2560)] * 4, kind="randn"), slow=True,
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
    sum_mean_cumsum, shapes((16, 128), (32, 128), (32, 256)), [f"{D}::test_helper_fn_defined"],
    note="PyTorch checks a scan helper is defined once in the combo; static shapes here"))
_add("full_sums_dynamic", fn_case(
    full_sums, lambda seed, batch=16: (lambda d: (d.randn(batch), d.randn(batch)))(Draw(seed)),
    [f"{D}::test_dynamic_shapes_persistent_reduction_dynamic_rdim"], dynamic=(1, 32), check_batches=(1, 16, 32),
    note="the batch is the reduced dim, up to 32 (PyTorch: torch._check(a.shape[0] <= 32)): Inductor sizes "
         "the persistent block for 32"))
_add("relu_sigmoid_1024", fn_case(
    relu_sigmoid, shapes((1024,), (1024,)),
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
    sum_mean_rows, shapes((32, 1024), (32, 1024)),
    [f"{PDL}::test_pdl_combo_kernel_reduction",
     f"{META}::test_combo_reduction_combo_grid_meta_has_per_subkernel_fields",
     f"{META}::test_combo_reduction_deterministic_has_contiguous_rdim_per_subkernel"]))
_add("activations_max_autotune", fn_case(
    activations, shapes((32, 1024), (64, 512), (16, 2048)), [f"{MAX}::test_combo_kernel_max_autotune"],
    note="aotcombo never autotunes: block sizes are fixed rules"))
_add("sum_mean_128x256", fn_case(
    sum_mean_rows, shapes((128, 256), (128, 256)), [f"{MAX}::test_combo_kernel_max_autotune_with_reduction"]))
_add("six_pointwise_mixed", fn_case(
    six_pointwise, shapes((8, 8192), (128, 64), (16, 4096), (512, 16), (32, 2048), (256, 32)),
    [f"{MAX}::test_combo_autotune_many_subkernels"]))
_add("inner_outer_128x256", fn_case(
    inner_outer, shapes((128, 256), (128, 256)), [f"{MAX}::test_combo_kernel_per_subkernel_reduction_hint"]))
_add("cos_sin_exp_neg", fn_case(
    cos_sin_exp_neg, shapes((4, 65536), (4, 65536), (4, 8), (4, 8)), [f"{MAX}::test_combo_autotune_grouping"]))
_add("row_sums_32x256_1024", fn_case(
    row_sums, shapes((32, 256), (32, 1024)),
    [f"{MAX}::test_combo_max_persistent_rblock_gated_on_per_subkernel_per_subkernel_True",
     f"{MAX}::test_combo_max_persistent_rblock_gated_on_per_subkernel_per_subkernel_False"]))
_add("activations_coordesc", fn_case(
    activations, shapes((32, 1024), (256, 256), (16, 128)),
    [f"{MAX}::test_combo_kernel_coordesc_tunes_largest_subkernel_first"]))
_add("relu_sigmoid_tanh_1024", fn_case(
    relu_sigmoid_tanh, shapes((1024,), (1024,), (1024,)),
    [f"{META}::test_combo_pointwise_combo_grid_meta_has_per_subkernel_fields"]))
_add("rms_norm_pair", fn_case(
    rms_norm_pair, shapes((2048, 4096), (4096,), (2048, 4096), (4096,)),
    [f"{META}::test_combo_rms_norm_forwards_add_persistent_rblock"],
    small=shapes((64, 4096), (4096,), (64, 4096), (4096,)), slow=True,
    note="4096-wide rows; the interpreter checks 64 rows"))
_add("wide_resnet", Case(
    model=wide_resnet, inputs=shapes((1, 3, 224, 224), kind="randn"),
    tests=(f"{PEAK}::test_combo_kernel_peak_memory_wide_resnet",), slow=True,
    small=shapes((1, 3, 64, 64), kind="randn"), small_model=lambda: wide_resnet((1, 1, 2)),
    note="PyTorch compares peak memory under combo_kernel_peak_memory_* gates; here: launches and outputs. "
         "The interpreter checks 1, 1, 2 blocks per layer on a 64x64 image (the whole model: 7 minutes)"))


def case_of(test: str) -> str | None:
    for name, case in CASES.items():
        if test in case.tests:
            return name
    return None
