"""Plan: group mutually independent kernels into combo kernels.

The traced program is a list of ops over named values. The work on the weights
alone is planned apart, to run once at load (``at_load``). We build the
dependency graph on *storage* (``dependencies``: a view writes what its base holds), give every
op its ASAP level (longest path from the inputs, where only device ops, kernel
launches and extern calls, add to a path's length: host-side allocations, views
and sizes cost nothing), and combine the kernel launches of one level: two
launches of one level never have a path between them, so each group is
mutually independent by construction. Inside a level,
launches are split the way Inductor's combo partition does
(``triton_combo_kernel.py``): by tiling dimensionality, long reductions apart,
very large pointwise kernels alone, and never more than ``MAX_ARGS`` distinct
pointers per combo.

The plan's program is the traced one, reordered level by level (the load's ops first), with
each group of launches replaced by one ``ComboLaunch``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from . import at_load as at_load_mod, blocks as blocks_mod
from .dependencies import graph_levels
from .. import graph as g
from ..inputs.options import DISPATCHES

MAX_ARGS = 250  # the seed's limit: more pointer arguments than this hit Triton limits
# Shared memory one combo kernel's tensor-core sub-kernels may take together: Triton gives each
# sub-kernel's pipelined tiles their own (SD 1.5's UNet: 17 fused linears of one level asked for
# 720 KB, and no GPU has that). 96 KB fits every arch from sm_80 (sm_86 and sm_89 allow 99 KB).
MAX_SHARED = 96 * 1024
LONG_REDUCTION = 2048  # rnumel above which a looped reduction runs long
LARGE_POINTWISE = 51_200_000  # the seed's LARGE_NUMELS
ROUND_ROBIN_UTILIZATION = 0.8  # the seed's BLOCK_UTILIZATION


@dataclass(frozen=True)
class SubKernel:
    kernel: g.Kernel
    launch: g.Launch
    blocks: blocks_mod.Blocks


@dataclass(frozen=True)
class Combo:
    name: str
    subs: tuple[SubKernel, ...]
    dispatch: str  # sequential | round_robin
    params: tuple[str, ...]  # distinct value names passed, in order
    level: int  # the dependency level its sub-kernels share

    @property
    def num_warps(self) -> int:
        return max(s.blocks.num_warps for s in self.subs)

    @property
    def num_stages(self) -> int:
        return max(s.blocks.num_stages for s in self.subs)

    @property
    def dynamic(self) -> bool:
        """Whether the grid depends on a dynamic batch (then ``grid`` is its largest value)."""
        return any(s.blocks.dynamic_axes for s in self.subs)

    @property
    def grid(self) -> int:
        programs = [s.blocks.programs for s in self.subs]
        if self.dispatch == "round_robin":
            return len(programs) * max(programs)
        return sum(programs)


@dataclass(frozen=True)
class ComboLaunch:
    combo: str
    args: tuple[g.Ref, ...]


@dataclass(frozen=True)
class Plan:
    """The program's ops in order: the first ``load.ops`` run once at load (``prepare``, on the
    weights alone; ``at_load.py``) with the first ``load.combos`` combos, the rest per call."""

    graph: g.Graph
    ops: tuple  # g.Op (except Launch) | ComboLaunch
    combos: tuple[Combo, ...]
    levels: tuple[int, ...]  # each op's dependency level
    load: LoadPart | None = None

    def combo(self, name: str) -> Combo:
        return next(c for c in self.combos if c.name == name)

    @property
    def load_ops(self) -> tuple:
        return self.ops[:self.load.ops] if self.load else ()

    @property
    def call_ops(self) -> tuple:
        return self.ops[self.load.ops:] if self.load else self.ops

    @property
    def call_combos(self) -> tuple[Combo, ...]:
        return self.combos[self.load.combos:] if self.load else self.combos

    @property
    def kernel_launches(self) -> int:
        """Inductor's kernels (and ours) launched per call, before combining."""
        return sum(len(c.subs) for c in self.call_combos)

    @property
    def extern_calls(self) -> int:
        return sum(isinstance(op, g.Extern) for op in self.call_ops)


@dataclass(frozen=True)
class LoadPart:
    """What ``prepare`` does at load: its leading ops and combos, the weights forward then takes
    (the graph's it still reads, then prepared values), and the bytes those values hold."""

    ops: int
    combos: int
    forward_weights: tuple[str, ...]
    prepared: tuple[str, ...]
    held_bytes: int
    launches: int  # kernels (before combining) and extern calls it runs


# --- partition --------------------------------------------------------------------


def _group_key(sub: SubKernel) -> tuple:
    """Launches that may share a combo: the same tiling rank (the seed's base
    partition), long reductions apart, very large pointwise kernels alone.

    "Very large pointwise" is Inductor's rule exactly: a 1-D pointwise kernel (no y or z
    tile) over more than ``LARGE_POINTWISE`` elements. A tiled (2-D, 3-D) pointwise kernel
    joins its level's combo whatever its size, as in Inductor."""
    kernel = sub.kernel
    if kernel.family is not None:  # kernels of ours combine only with each other
        return (0, "matmul")
    rank = sum(1 for k, _ in kernel.numels if not k.startswith("r"))
    if not kernel.is_reduction and rank == 1 and kernel.numel.get("x", 0) > LARGE_POINTWISE:
        return (rank, "large_pointwise", id(sub))
    if kernel.heuristic == "reduction" and kernel.numel.get("r0_", 0) > LONG_REDUCTION:
        return (rank, "long_reduction")
    return (rank, "")


def _pointer_args(sub: SubKernel) -> list[str]:
    return [a.name for a in sub.launch.args if isinstance(a, g.Ref)]


def shared_bytes(sub: SubKernel) -> int:
    """The shared memory a kernel of ours takes for its pipelined tensor-core tiles (x's and W's,
    ``num_stages - 1`` deep, 16-bit; a GLU's two W tiles), the same in a combo; 0 for the others
    (Inductor's reductions take a few kB at most)."""
    tiles, stages = dict(sub.kernel.tiles), sub.blocks.num_stages
    if sub.kernel.family is None or stages <= 1 or not {"BLOCK_M", "BLOCK_N", "BLOCK_K"} <= set(tiles):
        return 0
    m, n, k = tiles["BLOCK_M"], tiles["BLOCK_N"], tiles["BLOCK_K"]
    products = 2 if "acc_up" in sub.kernel.source else 1
    return (stages - 1) * (m * k + products * k * n) * 2


def partition(subs: list[SubKernel], max_args: int = MAX_ARGS) -> list[list[SubKernel]]:
    """Split one level's launches into combos (order kept within each group), each within
    ``max_args`` pointers and ``MAX_SHARED`` bytes of shared memory."""
    groups: dict[tuple, list[SubKernel]] = {}
    for sub in subs:
        groups.setdefault(_group_key(sub), []).append(sub)
    combos: list[list[SubKernel]] = []
    for members in groups.values():
        current: list[SubKernel] = []
        names: set[str] = set()
        shared = 0
        for sub in members:
            mine = set(_pointer_args(sub))
            if current and (len(names | mine) > max_args or shared + shared_bytes(sub) > MAX_SHARED):
                combos.append(current)
                current, names, shared = [], set(), 0
            current.append(sub)
            names |= mine
            shared += shared_bytes(sub)
        if current:
            combos.append(current)
    return combos


def choose_dispatch(subs: list[SubKernel], requested: str) -> str:
    """Sequential unless asked; ``auto`` takes round robin when the sub-kernels
    are so even in size that its idle programs stay under 20% (the seed's rule)."""
    if requested != "auto":
        return requested
    programs = [s.blocks.programs for s in subs]
    if len(programs) > 1 and sum(programs) / (len(programs) * max(programs)) > ROUND_ROBIN_UTILIZATION:
        return "round_robin"
    return "sequential"


def make_plan(graph: g.Graph, dispatch: str = "sequential", combine: bool = True, max_args: int = MAX_ARGS,
              at_load: bool = True) -> Plan:
    """Reorder ``graph`` by levels and group each level's launches into combos.

    ``combine=False`` keeps one launch per kernel (still through the combo
    template), which is what tests compare against. ``at_load``: the work on the weights
    alone runs once at load, planned apart (its combos never hold a per-call kernel)."""
    from .memory import late_allocations  # (it reads this module's ComboLaunch)

    if dispatch not in DISPATCHES:
        raise ValueError(f"dispatch must be one of {DISPATCHES}, not {dispatch!r}")
    part = at_load_mod.split(graph) if at_load else None
    if part is None or not part.at_load:
        ops, levels_, combos = _planned(graph, dispatch, combine, max_args, 0)
        ops, levels_ = late_allocations(ops, levels_)
        return Plan(graph=graph, ops=tuple(ops), combos=tuple(combos), levels=tuple(levels_))
    load_graph = g.replace(graph, ops=tuple(op for i, op in enumerate(graph.ops) if i in part.at_load))
    call_graph = g.replace(graph, ops=tuple(op for i, op in enumerate(graph.ops) if i not in part.at_load))
    load_ops, load_levels, load_combos = _planned(load_graph, dispatch, combine, max_args, 0)
    call_ops, call_levels, call_combos = _planned(call_graph, dispatch, combine, max_args, len(load_combos))
    call_ops, call_levels = late_allocations(call_ops, call_levels)
    launches = sum(isinstance(op, (g.Launch, g.Extern)) for op in load_graph.ops)
    load = LoadPart(len(load_ops), len(load_combos), part.forward_weights, part.prepared, part.held_bytes, launches)
    return Plan(graph=graph, ops=tuple(load_ops + call_ops), combos=tuple(load_combos + call_combos),
                levels=tuple(load_levels + call_levels), load=load)


def _planned(graph: g.Graph, dispatch: str, combine: bool, max_args: int, first: int) -> tuple[list, list, list]:
    """``graph``'s ops by level, launches grouped into combos numbered from ``first``."""
    level = graph_levels(graph)
    by_level: dict[int, list[int]] = defaultdict(list)
    for i, lv in enumerate(level):
        by_level[lv].append(i)

    ops: list = []
    op_levels: list[int] = []
    combos: list[Combo] = []
    for lv in sorted(by_level):
        launches = []
        for i in by_level[lv]:
            op = graph.ops[i]
            if isinstance(op, g.Launch):
                kernel = graph.kernel(op.kernel)
                launches.append(SubKernel(kernel, op, blocks_mod.choose(kernel)))
            else:
                ops.append(op)
                op_levels.append(lv)
        groups = partition(launches, max_args) if combine else [[s] for s in launches]
        for members in groups:
            params = tuple(dict.fromkeys(n for s in members for n in _pointer_args(s)))
            combo = Combo(
                name=f"combo_{first + len(combos)}",
                subs=tuple(members),
                dispatch=choose_dispatch(members, dispatch),
                params=params,
                level=lv,
            )
            combos.append(combo)
            ops.append(ComboLaunch(combo.name, tuple(g.Ref(p) for p in params)))
            op_levels.append(lv)
    return ops, op_levels, combos
