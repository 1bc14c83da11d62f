"""Fixed block sizes and warps for each kernel: rules, not autotuning.

Every rule here is a pure function of the kernel's kind and sizes, decided at
build time; the package launches with the resulting grid and never tunes.
The numbers follow Inductor's own defaults (``triton_heuristics.py``) for the
common cases: 1024-element pointwise blocks, 32x32 tiles, 2048-wide inner
reductions, 64x8 outer reductions, and a persistent reduction keeping up to
4096 elements per program in registers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import BUCKETS_INSTEAD, UnsupportedModelError
from ..graph import Kernel
from ..kernels.common import cdiv, next_power_of_2
from ..trace.kernel_text import fixed_blocks, masks_row_by_length

POINTWISE_BLOCK = 1024
TILE_ELEMENTS = 1024
TILED_PERSISTENT_X = 16  # x's share of a tiled persistent reduction's rows; y takes the rest
PERSISTENT_ELEMENTS = 4096
# Rows whose block is this many elements (513-1024: a transformer's hidden size of 768) take a
# program each, 4 warps, where PERSISTENT_ELEMENTS put 4 rows in one with 8 warps. H200, BERT-base
# fp16 (its layer norms), packages in turn in one run, ms, 3 repeats: 8 x 128 0.700 / 0.695 /
# 0.691 -> 0.682 / 0.676 / 0.673; 32 x 512 7.003 / 7.022 / 7.027 -> 6.963 / 6.986 / 6.992 (2 rows a
# program: 0.691 / 0.686 / 0.681 and 6.980 / 7.008 / 7.009; 8: 0.704 / 0.700 / 0.695 and 6.971 /
# 7.013 / 7.009); ViT-B/16 at batch 8 0.913 / 0.910 / 0.929 -> 0.895 / 0.893 / 0.912; GPT-2 small
# with its LM head (4 x 256, bf16) 0.887 / 0.884 / 0.884 -> 0.873 / 0.870 / 0.869. Same outputs.
# 1 or 2 warps a row, the fastest alone (H200, BERT's add + norm at 16384 rows, warm L2: 14.9 / 15.5
# against 16.6 us), were no faster in the models (2026-12-02, 1 / 2 / 4 warps in turn, ms, medians of 3
# runs: BERT 32 x 512 7.128 / 7.128 / 7.129, 8 x 128 0.689 / 0.690 / 0.690, ViT-B 0.875 / 0.875 / 0.871,
# GPT-2 0.838 / 0.839 / 0.834).
PERSISTENT_ROW_A_PROGRAM = 1024
INNER_REDUCTION_BLOCK = 2048
OUTER_REDUCTION = (64, 8)  # (XBLOCK, R0_BLOCK)
DEFAULT_REDUCTION = (8, 512)
ELEMENTS_PER_WARP = 256  # 8 elements per thread
MAX_WARPS = 8
MIN_SPLIT_SCAN_BLOCK = 256  # Inductor sizes a split scan's workspace for blocks of at least this

@dataclass(frozen=True)
class Blocks:
    """The launch shape of one kernel: constexpr block sizes, blocks per axis, warps."""

    constexprs: tuple[tuple[str, int], ...]  # values for the kernel's constexpr params
    axes: tuple[int, int, int]  # programs along x, y, z (at the top of a dynamic batch's range)
    num_warps: int
    # Axes whose program count is computed at run time (a dynamic batch): (axis, numel
    # name such as "x", block size); the count is ceil(numel / block size).
    dynamic_axes: tuple[tuple[int, str, int], ...] = ()
    num_stages: int = 1  # software pipelining of loads (matmul kernels; 1: none)

    @property
    def programs(self) -> int:
        return self.axes[0] * self.axes[1] * self.axes[2]


def _warps(elements: int) -> int:
    return max(1, min(MAX_WARPS, next_power_of_2(max(1, elements // ELEMENTS_PER_WARP))))


def choose(kernel: Kernel) -> Blocks:
    """Block sizes for ``kernel`` by fixed rules."""
    if kernel.family is not None:  # a kernel of ours (kernels/): its tiles, grid and warps are fixed
        return Blocks(constexprs=kernel.tiles, axes=kernel.grid, num_warps=kernel.num_warps,
                      num_stages=kernel.num_stages,  # a grid of "xnumel" programs, given per call
                      dynamic_axes=((0, "x", 1),) if "x" in kernel.dynamic_numels else ())
    numel = kernel.numel
    params = set(kernel.block_params)
    fixed = fixed_blocks(kernel.source)
    unknown = params - {"XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK"}
    if kernel.rsplit_size:
        unknown -= {"RSPLIT_SIZE", "NUM_STAGES"}
    if unknown:
        raise UnsupportedModelError(
            f"kernel {kernel.name} has block parameters {sorted(unknown)} that aotcombo has no rule for"
        )
    x, y, z = numel.get("x", 1), numel.get("y", 1), numel.get("z", 1)
    r0, r1 = numel.get("r0_", 1), numel.get("r1_", 1)
    sizes: dict[str, int] = {}

    if not kernel.is_reduction:
        if "YBLOCK" in params or "ZBLOCK" in params:
            # Tiles: x gets up to 64, y and z share the rest of TILE_ELEMENTS.
            sizes["XBLOCK"] = min(64 if "ZBLOCK" not in params else 32, next_power_of_2(x))
            rest = TILE_ELEMENTS // sizes["XBLOCK"]
            if "YBLOCK" in params:
                sizes["YBLOCK"] = min(rest if "ZBLOCK" not in params else 8, next_power_of_2(y))
                rest //= sizes["YBLOCK"]
            if "ZBLOCK" in params:
                sizes["ZBLOCK"] = max(1, min(rest, next_power_of_2(z)))
        else:
            sizes["XBLOCK"] = min(POINTWISE_BLOCK, next_power_of_2(x))
    elif kernel.rsplit_size:
        # A mixed-order reduction: each program walks RSPLIT_SIZE rows (Inductor chose the
        # split, and sized the partial-result workspace for it) XBLOCK at a time; the
        # block sizes follow Inductor's apply_rsplit_size.
        if kernel.dynamic_numels:
            raise UnsupportedModelError(
                f"kernel {kernel.name} is a mixed-order reduction over a dynamic axis; aotcombo sizes its "
                "split at build time", fix=BUCKETS_INSTEAD)
        rsplit = kernel.rsplit_size
        sizes["RSPLIT_SIZE"] = rsplit
        if "XBLOCK" in params:
            sizes["XBLOCK"] = min(max(rsplit // 32, 4 if r0 <= 512 else 1), 16, rsplit)
        if "NUM_STAGES" in params:
            sizes["NUM_STAGES"] = min(max(rsplit // sizes.get("XBLOCK", 1) // 4, 1), 2 if r0 > 8192 else 3)
    elif kernel.heuristic == "persistent_reduction":
        for r in (r for r in kernel.dynamic_numels if r.startswith("r")):
            # One block per row over the dynamic batch: fine when Inductor sized the block for
            # the top of the batch's range (fixed in the source; ``numel`` holds that top) and
            # masks the row by its run-time length.
            block = fixed.get(f"{r.upper()}BLOCK", 0)
            if block < numel[r] or not masks_row_by_length(kernel.source, r):
                raise UnsupportedModelError(
                    f"kernel {kernel.name} reduces over a dynamic axis in one block per row, sized for at "
                    f"most {block} of its up to {numel[r]} elements",
                    fix=BUCKETS_INSTEAD)
        rblock = fixed.get("R0_BLOCK", next_power_of_2(r0)) * fixed.get("R1_BLOCK", 1)
        if "XBLOCK" in params:
            one_row = rblock == PERSISTENT_ROW_A_PROGRAM and "YBLOCK" not in params
            sizes["XBLOCK"] = 1 if one_row else max(1, min(next_power_of_2(x), PERSISTENT_ELEMENTS // rblock))
        if "YBLOCK" in params:  # a tiled reduction (MaxViT's window layer norms): x and y share the tile
            if "XBLOCK" in params:
                sizes["XBLOCK"] = min(sizes["XBLOCK"], TILED_PERSISTENT_X)
            sizes["YBLOCK"] = max(1, min(next_power_of_2(y), PERSISTENT_ELEMENTS // rblock // sizes.get("XBLOCK", 1)))
    else:
        if kernel.reduction_hint == "INNER":
            xb, rb = 1, min(INNER_REDUCTION_BLOCK, next_power_of_2(r0))
        elif kernel.reduction_hint == "OUTER":
            xb, rb = min(OUTER_REDUCTION[0], next_power_of_2(x)), min(OUTER_REDUCTION[1], next_power_of_2(r0))
        else:
            xb, rb = min(DEFAULT_REDUCTION[0], next_power_of_2(x)), min(DEFAULT_REDUCTION[1], next_power_of_2(r0))
        if "XBLOCK" in params:
            sizes["XBLOCK"] = xb
        if "R0_BLOCK" in params:
            sizes["R0_BLOCK"] = rb
        if "R1_BLOCK" in params:
            sizes["R1_BLOCK"] = min(8, next_power_of_2(r1))
        if "YBLOCK" in params:
            sizes["YBLOCK"] = min(8, next_power_of_2(y))

    missing = params - set(sizes)
    if missing:
        raise UnsupportedModelError(f"kernel {kernel.name}: no rule for block parameters {sorted(missing)}")

    block = {**fixed, **sizes}
    xblock = block.get("XBLOCK", 1)
    axes = (
        cdiv(x, block.get("RSPLIT_SIZE", xblock)),
        cdiv(y, block.get("YBLOCK", 1)) if "y" in numel else 1,
        cdiv(z, block.get("ZBLOCK", 1)) if "z" in numel else 1,
    )
    if kernel.heuristic == "split_scan":
        axes = _split_scan_axes(kernel, block, x, r0)
    elements = math.prod(v for k, v in block.items() if k in ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK"))
    ordered = tuple((p, sizes[p]) for p in kernel.block_params)
    dynamic_axes = tuple((axis, name, block.get(f"{name.upper()}BLOCK", 1))
                         for axis, name in enumerate("xyz") if name in kernel.dynamic_numels)
    return Blocks(constexprs=ordered, axes=axes, num_warps=_warps(elements), dynamic_axes=dynamic_axes)


def _split_scan_axes(kernel: Kernel, block: dict, x: int, r0: int) -> tuple[int, int, int]:
    """A split scan (a cumsum too long for one block: a 128k vocabulary's) walks its row in
    blocks of R0_BLOCK along x, one row per program along y, and hands each block's total on
    through a workspace (decoupled look-back), which Inductor sized for blocks of at least
    ``MIN_SPLIT_SCAN_BLOCK`` elements (``triton.min_split_scan_rblock``)."""
    rblock = block.get("R0_BLOCK", 0)
    if kernel.dynamic_numels or block.get("XBLOCK", 1) != 1 or rblock < MIN_SPLIT_SCAN_BLOCK:
        raise UnsupportedModelError(
            f"kernel {kernel.name} is a split scan aotcombo cannot size (rows {x}, {r0} elements each"
            f"{', over a dynamic axis' if kernel.dynamic_numels else ''})",
            fix=BUCKETS_INSTEAD + ", or report it with the model")
    return cdiv(r0, rblock), x, 1
