"""Codegen: render combo kernels and the package program from Jinja templates.

``render_combo`` turns a planned ``Combo`` into a Python module holding one
``@triton.jit`` combo kernel; ``render_program`` turns the planned op list
into the package's ``forward``. Both are pure functions of the plan.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path

import jinja2

from .. import __version__
from . import graph as g
from ..errors import UnsupportedModelError
from ..runtime.manifest import PLACED
from .inductor import ATTENTION, KERNEL_PRELUDE
from .plan import Combo, ComboLaunch, Plan, SubKernel

_PROGRAM_ID = re.compile(r"tl\.program_id\((\d)\)")
_NUM_PROGRAMS = re.compile(r"tl\.num_programs\((\d)\)")
_DEF_NAME = re.compile(r"^def (\w+)\(", re.M)
_AXES = ("pid_x", "pid_y", "pid_z")
PDL_MIN_ARCH = 90  # griddepcontrol (programmatic dependent launch): Hopper and later
_PDL_CALLS = ("tl.extra.cuda.gdc_wait()", "tl.extra.cuda.gdc_launch_dependents()")


def templates_dir() -> Path:
    """Installed, the templates ship inside the package (``aotcombo/templates``);
    in a source checkout they are the top-level ``templates/`` folder."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "templates"
    return installed if (installed / "combo_kernel.py.j2").is_file() else package.parent / "templates"


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(template: str, **context) -> str:
    return _environment().get_template(template).render(**context)


# --- combo kernels -------------------------------------------------------------------


def helper_source(sub: SubKernel) -> str:
    """Inductor's kernel as a jit helper that takes its program ids as arguments.

    Jit functions the kernel source defines besides the kernel (scan and sort
    combine functions) are renamed after the kernel, so two sub-kernels of one
    combo cannot clash."""
    kernel = sub.kernel
    source = kernel.source
    for other in _DEF_NAME.findall(source):
        if other != kernel.name:
            source = re.sub(rf"\b{other}\b", f"{kernel.name}_{other.lstrip('_')}", source)
    match = re.search(rf"^def {kernel.name}\((.*?)\):\s*$", source, re.M | re.S)
    if match is None:
        raise UnsupportedModelError(f"cannot find the definition of kernel {kernel.name} in its source")
    params = match.group(1).strip().rstrip(",")
    source = source[: match.start()] + f"def {kernel.name}({params}, pid_x, pid_y, pid_z):" + source[match.end():]
    axes = _axis_counts(sub, lambda name: f"{name}numel")
    source = _PROGRAM_ID.sub(lambda m: _AXES[int(m.group(1))], source)
    source = _NUM_PROGRAMS.sub(lambda m: axes[int(m.group(1))], source)
    return source.rstrip()


def _cdiv(numel: str, block: int) -> str:
    """ceil(numel / block) as an expression that is both Python and Triton."""
    return numel if block == 1 else f"(({numel} + {block - 1}) // {block})"


def _axis_counts(sub: SubKernel, numel_of) -> list[str]:
    """Programs along x, y, z of a sub-kernel as expressions: ints, or for the axes of a
    dynamic batch ceil(numel / block), with ``numel_of(name)`` naming the numel ("x")."""
    counts = [str(n) for n in sub.blocks.axes]
    for axis, name, block in sub.blocks.dynamic_axes:
        counts[axis] = _cdiv(numel_of(name), block)
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


def grid_expr(combo: Combo) -> str:
    """The combo kernel's grid as a Python expression of the program's values."""
    programs = [sub_programs(s) for s in combo.subs]
    if combo.dispatch == "round_robin":
        widest = programs[0] if len(programs) == 1 else f"max({', '.join(programs)})"
        return widest if len(programs) == 1 else f"{len(programs)} * {widest}"
    return " + ".join(programs)


def _literal(value) -> str:
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
        return _literal(arg)
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


def render_combo(combo: Combo, pdl: bool = False) -> str:
    """The combo kernel's module; ``pdl``: the kernel waits for the one launched before it
    (programmatic dependent launch, sm_90 and later: the runtime launches it early)."""
    helpers = list(dict.fromkeys(helper_source(s) for s in combo.subs))
    setup, subs = _dispatch(combo)
    return render(
        "combo_kernel.py.j2",
        combo=combo,
        grid="per call: " + grid_expr(combo) if combo.dynamic else f"({combo.grid}, 1, 1)",
        helpers=helpers,
        params=list(parameter_names(combo).values()),
        setup=setup,
        subs=subs,
        prelude=KERNEL_PRELUDE,
        pdl=pdl,
        pdl_calls=_PDL_CALLS,
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


# --- program ---------------------------------------------------------------------------


def _expr(value) -> str:
    if isinstance(value, g.Ref):
        return value.name
    if isinstance(value, g.Const):
        if value.kind == "device":
            return "device"
        return f"torch.{value.value}"
    if isinstance(value, list):
        return "[" + ", ".join(_expr(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_expr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return _literal(value)


def _op_parts(op: str) -> tuple[str, str, str]:
    """``namespace::name.overload`` as (namespace, name, overload)."""
    namespace, rest = op.split("::")
    name, overload = rest.split(".") if "." in rest else (rest, "default")
    return namespace, name, overload


def _op_call(op: str) -> str:
    if op == ATTENTION:
        return "attention"  # runtime/ops.py: the public API in place of Inductor's private ops
    namespace, name, overload = _op_parts(op)
    prefix = "aten" if namespace == "aten" else f"torch.ops.{namespace}"
    return f"{prefix}.{name}.{overload}"


def placed_outputs(graph: g.Graph, ops) -> dict[str, int]:
    """The output buffers the program allocates itself and returns as they are, by name:
    their index among the tensors it returns. Given ``aotcombo_out``, the program writes
    them into ``aotcombo_out[index]`` instead (graph mode's output slots: no copy out)."""
    scalars = {op.out for op in ops if isinstance(op, g.Scalar)}  # ints: no tensor of the returned ones
    names = [o for o in graph.user_outputs if o is not None and o not in scalars]
    allocated = {op.out for op in ops if isinstance(op, g.Alloc)}
    return {name: k for k, name in enumerate(names) if name in allocated and names.count(name) == 1}


def view_roots(ops, placed: dict[str, int]) -> dict[str, str | None]:
    """For each view, the tensor it views at the end of its chain of views when that one may
    start past its storage's beginning (an input, a weight, a placed output), else None
    (a buffer the program allocates: its storage offset is 0). A view's offset counts
    from that tensor's start, as Inductor's ``ReinterpretView`` does."""
    allocated = {op.out for op in ops if isinstance(op, g.Alloc) and op.out not in placed}
    roots: dict[str, str | None] = {}
    for op in ops:
        if isinstance(op, g.View):
            root = roots.get(op.base, op.base)
            roots[op.out] = None if root is None or root in allocated else root
    return roots


def _op_line(op, combos: dict[str, tuple[int, Combo]], placed: dict[str, int], roots: dict,
             restride: dict[str, tuple]) -> str:
    if isinstance(op, g.Alloc):
        s = op.spec
        alloc = f"empty_strided({_expr(s.shape)}, {_expr(s.stride)}, dtype=torch.{s.dtype}, device=device)"
        if op.out in placed:
            return f"{op.out} = {alloc} if {PLACED} is None else {PLACED}[{placed[op.out]}]"
        return f"{op.out} = {alloc}"
    if isinstance(op, g.View):
        s, root = op.spec, roots.get(op.out)
        offset = _expr(s.storage_offset) if root is None else f"{root}.storage_offset() + {_expr(s.storage_offset)}"
        return f"{op.out} = as_strided({op.base}, {_expr(s.shape)}, {_expr(s.stride)}, {offset})"
    if isinstance(op, g.Scalar):
        return f"{op.out} = {_scalar_expr(op)}"
    if isinstance(op, g.GetItem):
        return f"{op.out} = {op.base}[{op.index}]"
    if isinstance(op, g.Extern):
        args = [_expr(a) for a in op.args] + [f"{k}={_expr(v)}" for k, v in op.kwargs]
        call = f"{_op_call(op.op)}({', '.join(args)})"
        if op.out in restride:  # a new tensor whose layout the backend picks at run time
            return f"{op.out} = in_strides({call}, {_expr(restride[op.out])})"
        return f"{op.out} = {call}" if op.out else call
    if isinstance(op, ComboLaunch):
        index, combo = combos[op.combo]
        args = [grid_expr(combo)] if combo.dynamic else []
        return f"kernels[{index}]({', '.join(args + [a.name for a in op.args])})"
    raise TypeError(op)


_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%"}


def _scalar_expr(op: g.Scalar) -> str:
    args = [_expr(a) for a in op.args]
    if op.fn == "size":
        return f"{args[0]}.shape[{args[1]}]"
    if op.fn in _OPERATORS:
        return f"{args[0]} {_OPERATORS[op.fn]} {args[1]}"
    if op.fn == "neg":
        return f"-{args[0]}"
    if op.fn == "sum":
        return " + ".join(args) or "0"
    return f"{op.fn}({', '.join(args)})"  # max, min


def _structure_expr(structure: tuple, leaves) -> str:
    """The Python expression rebuilding the model's output nesting from flat values."""
    kind = structure[0]
    if kind == "leaf":
        name = next(leaves)
        return name if name is not None else "None"
    if kind == "none":
        return "None"
    if kind == "dict":
        items = ", ".join(f"{k!r}: {_structure_expr(c, leaves)}" for k, c in zip(structure[1], structure[2]))
        return "{" + items + "}"
    if kind == "ordered_dict":
        items = "".join(f"({k!r}, {_structure_expr(c, leaves)}), " for k, c in zip(structure[1], structure[2]))
        return f"OrderedDict([{items.rstrip(', ')}])"
    if kind == "structseq":
        children = ", ".join(_structure_expr(c, leaves) for c in structure[2])
        return f"{structure[1]}(({children},))"
    children = [_structure_expr(c, leaves) for c in structure[1]]
    if kind == "list":
        return "[" + ", ".join(children) + "]"
    return f"({children[0]},)" if len(children) == 1 else "(" + ", ".join(children) + ")"


def _kinds(structure: tuple) -> set[str]:
    """The kinds of container an output structure is made of (itself and all below it)."""
    kind = structure[0]
    children = structure[2] if kind in ("dict", "ordered_dict", "structseq") else \
        structure[1] if kind in ("tuple", "list") else ()
    return {kind}.union(*map(_kinds, children))


def fresh_outputs(graph: g.Graph, ops) -> dict[str, tuple]:
    """The extern calls' outputs that are new tensors (no ``out=``, no view of an input), by
    name: the strides the trace planned for each. The later kernels read them through those
    strides, but the backend picks a new tensor's layout at run time (a convolution of a
    channels-last input on another device or torch may return another one): the program
    checks, and copies into the planned layout where they differ."""
    specs = graph.spec
    fresh = {}
    for op in ops:
        if not isinstance(op, g.Extern) or op.out is None or op.writes or op.aliases or op.op == ATTENTION:
            continue
        spec = specs.get(op.out)
        overload = _overload(op.op)
        returns = overload._schema.returns if overload is not None else ()
        if spec is None or len(returns) != 1 or returns[0].alias_info is not None or \
                str(returns[0].type) != "Tensor" or not all(isinstance(v, int) for v in spec.stride):
            continue
        fresh[op.out] = spec.stride
    return fresh


def _overload(op: str):
    """The torch op overload named ``namespace::name.overload``, or None."""
    import torch

    namespace, name, overload = _op_parts(op)
    return getattr(getattr(getattr(torch.ops, namespace), name, None), overload, None)


def render_program(plan: Plan, structure: tuple, name: str) -> str:
    graph = plan.graph
    combos = {c.name: (i, c) for i, c in enumerate(plan.combos)}
    placed = placed_outputs(graph, plan.ops)
    roots = view_roots(plan.ops, placed)
    restride = fresh_outputs(graph, plan.ops)
    return render(
        "program.py.j2",
        name=name,
        version=__version__,
        n_launches=len(plan.combos),
        n_externs=plan.extern_calls,
        inputs=[i.name for i in sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)],
        runtime_ops=sorted({_op_call(op.op) for op in plan.ops if isinstance(op, g.Extern) and op.op == ATTENTION}
                           | ({"in_strides"} if restride else set())),
        weights=[i.name for i in graph.inputs if i.kind == "weight"],
        placed=PLACED,
        body=[_op_line(op, combos, placed, roots, restride) for op in plan.ops]
        + [f"{name}.copy_({graph.outputs[i]})" for name, i in graph.mutations],
        result=_structure_expr(structure, iter(graph.user_outputs)),
        ordered_dict="ordered_dict" in _kinds(structure),
    )
