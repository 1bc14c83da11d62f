"""The package's program: the planned op list as the module holding ``forward``
(``templates/program.py.j2``). A pure function of the plan."""

from __future__ import annotations

from ... import __version__
from ...runtime.manifest import GROUP, PLACED
from .. import graph as g
from ..graph import ATTENTION, COLLECTIVES
from ..plan.combos import Combo, ComboLaunch, Plan
from ..plan.memory import releases
from .combo import grid_expr, literal
from .render import render


def _expr(value) -> str:
    if isinstance(value, g.Ref):
        return value.name
    if isinstance(value, g.Const):
        if value.kind == "device":
            return "device"
        if value.kind == "group":  # a collective's process group: the one the package is loaded in
            return GROUP
        return f"torch.{value.value}"
    if isinstance(value, list):
        return "[" + ", ".join(_expr(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_expr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return literal(value)


def _op_parts(op: str) -> tuple[str, str, str]:
    """``namespace::name.overload`` as (namespace, name, overload)."""
    namespace, rest = op.split("::")
    name, overload = rest.split(".") if "." in rest else (rest, "default")
    return namespace, name, overload


# Ops the program calls through runtime/ops.py instead: attention through the public API in place
# of Inductor's private ops; the in-place all-reduce as c10d's on the current stream; cuBLASLt's
# epilogue with the activation CUDA computes, on the CPU too; a convolution with cuDNN's epilogue;
# matmuls, large 16-bit ones by cuBLASLt with no workspace.
RUNTIME_OPS = {ATTENTION: "attention", f"{COLLECTIVES}::all_reduce_.default": "all_reduce_",
               "aten::_addmm_activation.default": "addmm_activation", "aotcombo::fused_conv.default": "fused_conv",
               "aten::addmm.out": "addmm_lt", "aten::mm.out": "mm_lt"}


def _op_call(op: str) -> str:
    if op in RUNTIME_OPS:
        return RUNTIME_OPS[op]
    namespace, name, overload = _op_parts(op)
    prefix = "aten" if namespace == "aten" else f"torch.ops.{namespace}"
    return f"{prefix}.{name}.{overload}"


def _returned_tensors(graph: g.Graph, ops) -> list[str]:
    """The names of the tensors the program returns, in order (ints left out)."""
    scalars = {op.out for op in ops if isinstance(op, g.Scalar)}
    return [o for o in graph.user_outputs if o is not None and o not in scalars]


def placed_outputs(graph: g.Graph, ops) -> dict[str, int]:
    """The output buffers the program allocates itself and returns as they are, by name:
    their index among the tensors it returns. Given ``aotcombo_out``, the program writes
    them into ``aotcombo_out[index]`` instead (graph mode's output slots: no copy out)."""
    names = _returned_tensors(graph, ops)
    allocated = {op.out for op in ops if isinstance(op, g.Alloc)}
    return {name: k for k, name in enumerate(names) if name in allocated and names.count(name) == 1}


def placed_roots(graph: g.Graph, ops, placed: dict[str, int]) -> dict[str, tuple[int, g.View]]:
    """The buffers the program allocates whose one use as an output is through a view (a padded
    LM head's logits, a reshape): by name, that output's index among the tensors returned and its
    view. Given ``aotcombo_out``, the program allocates such a buffer around that output's tensor
    where its slot holds it (runtime/ops.py ``placed_root``), so that the view is the output."""
    allocs = {op.out: op for op in ops if isinstance(op, g.Alloc) and op.out not in placed}
    views = {op.out: op for op in ops if isinstance(op, g.View)}
    root_of: dict[str, str] = {}
    for view in views.values():
        root_of[view.out] = root_of.get(view.base, view.base)
    names = _returned_tensors(graph, ops)
    returned_roots = [root_of.get(name, name) for name in names]
    found = {}
    for k, name in enumerate(names):
        root = root_of.get(name)
        if name in views and root in allocs and returned_roots.count(root) == 1 and names.count(name) == 1:
            found[root] = (k, views[name])
    return found


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
             restride: dict[str, tuple], around: dict | None = None) -> str:
    if isinstance(op, g.Alloc):
        s = op.spec
        if around and op.out in around:  # around the view that is an output
            k, view = around[op.out]
            return (f"{op.out} = placed_root({PLACED}, {k}, {_expr(s.shape)}, {_expr(s.stride)}, "
                    f"{_expr(view.spec.storage_offset)}, {_expr(view.spec.stride)}, torch.{s.dtype}, device)")
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


_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "pow": "**"}


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


def _body(plan: Plan, combos: dict, placed: dict, roots: dict, restride: dict, around: dict) -> list[str]:
    """forward's lines: each op's, a ``del`` of the names dead after it (``plan.memory``: their
    memory goes back to torch's allocator, or the graph's pool, for the next buffers), then
    the copies back into the inputs the model updates."""
    graph, ops = plan.graph, plan.call_ops
    lines = []
    for op, dead in zip(ops, releases(ops, set(graph.outputs), roots)):
        lines.append(_op_line(op, combos, placed, roots, restride, around))
        if dead:
            lines.append(f"del {', '.join(dead)}")
    return lines + [f"{name}.copy_({graph.outputs[i]})" for name, i in graph.mutations]


def render_program(plan: Plan, structure: tuple, name: str) -> str:
    graph = plan.graph
    combos = {c.name: (i, c) for i, c in enumerate(plan.combos)}
    placed = placed_outputs(graph, plan.ops)
    around = placed_roots(graph, plan.call_ops, placed)
    roots = view_roots(plan.ops, {**placed, **dict.fromkeys(around, -1)})  # a placed root may start past 0
    restride = fresh_outputs(graph, plan.ops)
    return render(
        "program.py.j2",
        name=name,
        version=__version__,
        n_launches=len(plan.call_combos),
        n_externs=plan.extern_calls,
        inputs=[i.name for i in sorted((i for i in graph.inputs if i.kind == "user"), key=lambda i: i.key)],
        runtime_ops=sorted({_op_call(op.op) for op in plan.ops if isinstance(op, g.Extern) and op.op in RUNTIME_OPS}
                           | ({"in_strides"} if restride else set()) | ({"placed_root"} if around else set())),
        weights=[i.name for i in graph.inputs if i.kind == "weight"],
        forward_weights=list(plan.load.forward_weights) if plan.load else [i.name for i in graph.inputs
                                                                           if i.kind == "weight"],
        placed=PLACED,
        group=GROUP if any(g.is_collective(op) for op in plan.ops) else None,
        prepare=[_op_line(op, combos, placed, roots, restride) for op in plan.load_ops],
        load=plan.load,
        body=_body(plan, combos, placed, roots, restride, around),
        result=_structure_expr(structure, iter(graph.user_outputs)),
        ordered_dict="ordered_dict" in _kinds(structure),
    )
