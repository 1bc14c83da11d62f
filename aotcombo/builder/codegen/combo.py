"""A planned ``Combo`` as the source of one ``@triton.jit`` combo kernel: each sub-kernel a
jit helper taking its program ids, dispatched on ranges of ``program_id(0)``
(``templates/combo_kernel.py.j2``). A pure function of the plan."""

from __future__ import annotations

import math

from ...errors import UnsupportedModelError
from .. import graph as g
from ..plan.combos import Combo, ComboLaunch, Plan, SubKernel
from ..trace.config import KERNEL_PRELUDE
from ..trace.kernel_text import as_helper
from .render import render

PDL_MIN_ARCH = 90  # griddepcontrol (programmatic dependent launch): Hopper and later
_PDL_CALLS = ("tl.extra.cuda.gdc_wait()", "tl.extra.cuda.gdc_launch_dependents()")


def early_launches(plan: Plan) -> set[str]:
    """Programmatic dependent launch (sm_90 and later): the combos launched early, each waiting
    on the GPU for the kernel before it (those after one of ours, or first). Every combo of such
    a build lets the launch after it start once it has started (``render_combo``'s trigger): where
    that launch is not early (cuBLAS's, or ours after an extern call) the trigger does nothing, and
    a kernel's image then does not depend on what follows it, so the same kernel in two programs
    (two size classes', two buckets') is one image: a dynamic BERT-base's wheel 160 -> 151 kB.

    Not after an extern call or a collective. After a collective the stream waits on an event
    of NCCL's stream, not on a kernel: launching early gains nothing there. Next to cuBLAS's
    and cuDNN's kernels it measured slower (H200, medians of 300, packages in turn in one run,
    2026-12-02). PDL everywhere against none: op by op, BERT-base's add + layer norms between
    its matmuls took 526 us against 441 (torch.compile's: 424). Everywhere against this rule:
    BERT-base 32 x 512 6.887 -> 6.805 ms, 8 x 128 0.665 -> 0.637, ViT-B/16 0.903 -> 0.867,
    GPT-2 0.842 -> 0.838, Whisper encoder 2.093 -> 2.051, ResNet-50 0.601 -> 0.585, Llama 3.2 1B
    prefill 1.352 -> 1.357, its decode step (no extern calls) 0.866 -> 0.867; no PDL at all
    measured as this rule within 0.3 %. Between our own kernels it gains: the 1B decode step
    without PDL against with it (quantized_llm_bench.py, one run, position 5): bf16 0.934 ->
    0.867 ms, int8 0.684 -> 0.633, int4 0.682 -> 0.646.
    """
    early, before = set(), None
    for op in (op for op in plan.ops if isinstance(op, (ComboLaunch, g.Extern))):  # a collective is an Extern
        if isinstance(op, ComboLaunch) and (before is None or isinstance(before, ComboLaunch)):
            early.add(op.combo)
        before = op
    return early


def helper_source(sub: SubKernel) -> str:
    """Inductor's kernel (or ours) as a jit helper that takes its program ids as arguments."""
    return as_helper(sub.kernel.name, sub.kernel.source, _axis_counts(sub, lambda name: f"{name}numel"))


def _cdiv_expr(numel: str, block: int) -> str:
    """ceil(numel / block) as an expression that is both Python and Triton."""
    return numel if block == 1 else f"(({numel} + {block - 1}) // {block})"


def _axis_counts(sub: SubKernel, numel_of) -> list[str]:
    """Programs along x, y, z of a sub-kernel as expressions: ints, or for the axes of a
    dynamic batch ceil(numel / block), with ``numel_of(name)`` naming the numel ("x")."""
    counts = [str(n) for n in sub.blocks.axes]
    for axis, name, block in sub.blocks.dynamic_axes:
        counts[axis] = _cdiv_expr(numel_of(name), block)
    return counts


def _numel_value(sub: SubKernel, names: dict[str, str] | None = None):
    """``numel_of`` for the program (values by name) and, with ``names`` (value -> the combo
    kernel's parameter), for the combo kernel: the value passed for the numel."""
    passed = {p: a for p, _, a in sub.kernel.bind(sub.launch.args)}

    def numel_of(name: str) -> str:
        value = passed[f"{name}numel"]
        if not isinstance(value, g.Ref):
            return str(value)
        return names[value.name] if names else value.name

    return numel_of


def _product(factors: list[str]) -> str:
    dynamic = [f for f in factors if not f.isdigit()]
    static = math.prod(int(f) for f in factors if f.isdigit())
    if not dynamic:
        return str(static)
    return " * ".join(dynamic + ([str(static)] if static != 1 else []))


def sub_programs(sub: SubKernel, names: dict[str, str] | None = None) -> str:
    """A sub-kernel's program count: an int, or an expression of the program's values (or,
    with ``names``, of the combo kernel's parameters)."""
    return _product(_axis_counts(sub, _numel_value(sub, names)))


def grid_expr(combo: Combo, names: dict[str, str] | None = None) -> str:
    """The combo kernel's grid as a Python expression of the program's values (or, with
    ``names``, of the combo kernel's parameters: the same for every layer's copy)."""
    programs = [sub_programs(s, names) for s in combo.subs]
    if combo.dispatch == "round_robin":
        widest = programs[0] if len(programs) == 1 else f"max({', '.join(programs)})"
        return widest if len(programs) == 1 else f"{len(programs)} * {widest}"
    return " + ".join(programs)


def literal(value) -> str:
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            return f"float('{value}')"
        return repr(value)
    return repr(value)


_TL_INT = {"i32": "tl.int32", "i64": "tl.int64"}


def _sub_arg(ty: str, arg, passed: dict[str, str], names: dict[str, str]) -> str:
    """A sub-kernel's argument in the combo kernel: a literal, a combo parameter, or (an integer
    the combo takes wider than this sub-kernel declares it) that parameter cast back."""
    if not isinstance(arg, g.Ref):
        return literal(arg)
    if passed.get(arg.name, ty) != ty:
        return f"{names[arg.name]}.to({_TL_INT[ty]})"
    return names[arg.name]


def parameter_names(combo: Combo) -> dict[str, str]:
    """The combo kernel's parameter for each value it takes: by position (``in0``, ``in1``, ...),
    so that the combos of two identical layers are one source (compiled once)."""
    return {value: f"in{i}" for i, value in enumerate(combo.params)}


def _sub_call(sub: SubKernel, passed: dict[str, str], names: dict[str, str]) -> str:
    args = [f"{p}={_sub_arg(ty, a, passed, names)}" for p, ty, a in sub.kernel.bind(sub.launch.args)]
    nx, ny, nz = _axis_counts(sub, _numel_value(sub, names))
    if ny != "1" or nz != "1":
        nxy = _product([nx, ny])
    pids = {
        "pid_x": "pid_offset" if ny == nz == "1" else f"pid_offset % ({nx})",
        "pid_y": "0" if ny == "1" else (f"pid_offset // ({nx})" if nz == "1" else f"(pid_offset // ({nx})) % ({ny})"),
        "pid_z": "0" if nz == "1" else f"pid_offset // ({nxy})",
    }
    keywords = [f"{p}={v}" for p, v in sub.blocks.constexprs] + [f"{p}={v}" for p, v in pids.items()]
    return f"{sub.kernel.name}({', '.join(args + keywords)})"


def _dispatch(combo: Combo) -> tuple[list[str], list[dict]]:
    """The combo kernel's setup lines (where program ranges depend on a dynamic batch) and,
    per sub-kernel, its condition on ``pid``, its program offset and its call."""
    setup, subs = [], []
    names = parameter_names(combo)
    passed = dict(zip(combo.params, combo_signature(combo)[0].values()))
    start = "0"
    n = len(combo.subs)
    for i, sub in enumerate(combo.subs):
        programs = sub_programs(sub, names)
        if combo.dispatch == "round_robin":
            condition = f"pid % {n} == {i} and pid // {n} < {programs}" if n > 1 else f"pid < {programs}"
            offset = f"pid // {n}" if n > 1 else "pid"
        else:
            if start.isdigit() and programs.isdigit():
                end = str(int(start) + int(programs))
            else:
                end = f"end_{i}"
                setup.append(f"{end} = {start} + {programs}" if start != "0" else f"{end} = {programs}")
            condition = f"pid < {end}"
            offset = f"pid - {start}" if start != "0" else "pid"
            start = end
        subs.append({"condition": condition, "offset": offset, "call": _sub_call(sub, passed, names)})
    return setup, subs


def render_combo(combo: Combo, pdl: bool = False, trigger: bool | None = None) -> str:
    """The combo kernel's module; ``pdl``: the kernel waits for the one launched before it
    (programmatic dependent launch, sm_90 and later: the runtime launches it early);
    ``trigger`` (default: ``pdl``): it lets the launch after it start once it has started."""
    helpers = list(dict.fromkeys(helper_source(s) for s in combo.subs))
    setup, subs = _dispatch(combo)
    return render(
        "combo_kernel.py.j2",
        combo=combo,
        grid="per call: " + grid_expr(combo, parameter_names(combo)) if combo.dynamic else f"({combo.grid}, 1, 1)",
        helpers=helpers,
        params=list(parameter_names(combo).values()),
        setup=setup,
        subs=subs,
        prelude=KERNEL_PRELUDE,
        pdl_calls=_PDL_CALLS[:1] * pdl + _PDL_CALLS[1:] * (pdl if trigger is None else trigger),
    )


def combo_signature(combo: Combo) -> tuple[dict[str, str], list[str]]:
    """Triton types of the combo kernel's parameters (``parameter_names``), and those known
    16-byte aligned.

    An integer (a size of a dynamic batch) that one sub-kernel declares i32 and another i64
    is taken as i64, and cast back to i32 for the sub-kernels that declare it so."""
    types: dict[str, str] = {}
    aligned: dict[str, bool] = {}
    for sub in combo.subs:
        divisible = set(sub.kernel.divisible_by_16)
        for param, ty, arg in sub.kernel.bind(sub.launch.args):
            if not isinstance(arg, g.Ref):
                continue
            seen = types.setdefault(arg.name, ty)
            if seen != ty:
                if {seen, ty} != {"i32", "i64"}:
                    raise UnsupportedModelError(f"{combo.name}: value {arg.name} is passed as {seen} and as {ty}")
                types[arg.name] = "i64"
            aligned[arg.name] = aligned.get(arg.name, True) and param in divisible
    names = parameter_names(combo)
    return {names[p]: types[p] for p in combo.params}, [names[p] for p in combo.params if aligned[p]]
