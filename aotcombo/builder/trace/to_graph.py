"""Inductor's FX wrapper graph read into ``graph.Graph``: plain data, no live torch object."""

from __future__ import annotations

import collections
import itertools
import operator
from typing import Any

import sympy
import torch

from ...errors import BUCKETS_INSTEAD, UnsupportedModelError
from .. import graph as g
from ..graph import ATTENTION, COLLECTIVES
from .capture import is_int_expr, launch_marker
from .collectives import PACKAGED
from .diagnosis import node_where, target_name


def _size(value, axes: dict) -> int | str:
    """A size of a traced tensor: an int, an axis's name (``"seq"``) for a dynamic axis
    itself, or the text of an expression of the axes (``"768*seq"``: the runtime evaluates
    it). ``axes``: each dynamic axis's symbol -> its name."""
    if isinstance(value, int):
        return value
    expr = value.node.expr
    if expr.is_number:
        return int(expr)
    unknown = expr.free_symbols - set(axes)
    if unknown:
        raise UnsupportedModelError(
            f"a tensor's size {expr} depends on {', '.join(map(str, unknown))}, not only on the dynamic axes "
            f"({', '.join(axes.values())})", fix="build with --batch buckets, or without --dynamic")
    if expr.is_symbol:
        return axes[expr]
    return str(expr.subs({s: sympy.Symbol(axes[s]) for s in expr.free_symbols}))


def _spec(t: torch.Tensor, axes: dict) -> g.TensorSpec:
    return g.TensorSpec(
        shape=tuple(_size(s, axes) for s in t.shape),
        stride=tuple(_size(s, axes) for s in t.stride()),
        dtype=str(t.dtype).removeprefix("torch."),
        storage_offset=_size(t.storage_offset(), axes),
    )


def axis_symbols(gm, input_meta, dynamic) -> dict:
    """Each dynamic axis's symbol in the wrapper graph -> the axis's name, read off the user
    inputs' dims that carry it."""
    if dynamic is None:
        return {}
    where = {(i, d): axis.name for axis in dynamic.axes for i, d in axis.dims}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    axes, fixed = {}, {}
    for node, (kind, key) in zip(placeholders, input_meta):
        if kind != "user":
            continue
        for d, size in enumerate(node.meta["val"].shape):
            name = where.get((key, d))
            if name is None or isinstance(size, int) or not size.node.expr.is_symbol:
                if name is not None:
                    fixed[name] = size
                continue
            axes.setdefault(size.node.expr, name)
    lost = {name: size for name, size in fixed.items() if name not in axes.values()}
    if lost:  # export keeps every axis symbolic (its Dims are strict): a rewrite after it fixed one
        name, size = next(iter(lost.items()))
        raise UnsupportedModelError(
            f"the trace fixed the dynamic axis {name!r} to {size}: a rewrite of aotcombo's specialised it, so "
            "the package would answer every size with this one's (an aotcombo bug: please report it)",
            fix=f"build with buckets on {name!r} (one program per size) instead of making it dynamic")
    return axes


def _traced_spec(t: torch.Tensor, shape, stride, offset=0) -> g.TensorSpec:
    """The spec of an allocation or view from its call's arguments: ints, or ``Ref``s to
    the ``Scalar``s computing sizes that depend on the dynamic batch."""
    return g.TensorSpec(shape=tuple(_to_plain(list(shape))), stride=tuple(_to_plain(list(stride))),
                        dtype=str(t.dtype).removeprefix("torch."), storage_offset=_to_plain(offset))


_SCALAR_FUNCTIONS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.floordiv: "floordiv",
    operator.mod: "mod", operator.pow: "pow", operator.neg: "neg", torch.sym_max: "max", torch.sym_min: "min",
    torch.sym_sum: "sum",
}


def _scalar(node) -> g.Scalar | None:
    """The ``Scalar`` a wrapper node computes (a size of the dynamic batch), or None."""
    if node.target is torch.ops.aten.sym_size.int:
        return g.Scalar(node.name, "size", (g.Ref(node.args[0].name), int(node.args[1])))
    fn = _SCALAR_FUNCTIONS.get(node.target)
    if fn is None:
        if isinstance(node.meta.get("val"), torch.SymInt) or node.target in (torch.sym_float, torch.sym_not):
            name = getattr(node.target, '__name__', node.target)
            raise UnsupportedModelError(f"the compiled program computes a size with {name}, which aotcombo cannot "
                                        "package",
                                        fix=BUCKETS_INSTEAD)
        return None
    args = node.args[0] if fn == "sum" else node.args
    return g.Scalar(node.name, fn, tuple(_to_plain(a) for a in args))


def _to_plain(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return g.Ref(value.name)
    if isinstance(value, list):  # FX's immutable_list too: plain data only
        return [_to_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_plain(v) for v in value)
    if isinstance(value, torch.dtype):
        return g.Const("dtype", str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return g.Const("device", value.type)
    if isinstance(value, torch.layout):
        return g.Const("layout", str(value).removeprefix("torch."))
    if isinstance(value, torch.memory_format):
        return g.Const("memory_format", str(value).removeprefix("torch."))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if is_int_expr(value):
        return int(value)
    raise UnsupportedModelError(f"cannot package argument {value!r} of type {type(value).__name__}")


def op_name(op: torch._ops.OpOverload) -> str:
    return f"{op._schema.name}.{op._overloadname}"


def _written_args(op: torch._ops.OpOverload, args, kwargs) -> list[str]:
    written = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
        written += g.refs_in(_to_plain(value))
    return written


def _aliased_args(op: torch._ops.OpOverload, args, kwargs) -> list[str]:
    """Inputs whose storage the op's result shares (views, in-place ops)."""
    returned = {a for r in op._schema.returns if r.alias_info for a in r.alias_info.before_set}
    aliased = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is None or not (set(arg.alias_info.before_set) & returned):
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
        aliased += g.refs_in(_to_plain(value))
    return aliased


_PRIVATE_ATTENTION = frozenset({
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
})


# Orders of an attention output's dims (batch, heads, queries, dim), outermost first, tried in
# turn: the fused kernels' (batch, queries, heads, dim) viewed as (batch, heads, queries, dim),
# then contiguous, then the rest (flash attention's follows the query's: nn.MultiheadAttention's
# query, made (queries, batch, heads, dim), gives "mbhk").
ATTENTION_ORDERS = ("bmhk", "bhmk", *sorted({"".join(p) for p in itertools.permutations("bhmk")} - {"bmhk", "bhmk"}))


def _dense_order(out: torch.Tensor) -> str | None:
    """The order of ``out``'s dims (named b, h, m, k), outermost first, in which it is a dense
    buffer (a size-1 dim's stride aside), or None where it is none."""
    size = dict(zip("bhmk", (d.node.expr if isinstance(d, torch.SymInt) else d for d in out.shape)))
    stride = dict(zip("bhmk", (s.node.expr if isinstance(s, torch.SymInt) else s for s in out.stride())))
    for order in ATTENTION_ORDERS:
        expected, inner = {}, 1
        for dim in reversed(order):
            expected[dim], inner = inner, inner * size[dim]
        if all(size[d] == 1 or stride[d] == expected[d] for d in "bhmk"):
            return order
    return None


def _attention(node) -> g.Extern | None:
    """A private fused-attention op as the public call that makes it (``runtime.ops.attention``),
    or None for any other node. Only its first output may be used: the others (log-sum-exp,
    RNG state) are for training."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or op._schema.name.removeprefix("aten::") not in _PRIVATE_ATTENTION:
        return None
    names = [a.name for a in op._schema.arguments]
    bound = {**dict(zip(names, node.args)), **node.kwargs}
    where = node_where(node)
    if bound.get("dropout_p", 0.0) not in (0, 0.0):
        raise UnsupportedModelError(f"{op._schema.name}{where} uses dropout, which is training-only",
                                    fix="pass dropout_p=0.0 in the model")
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            raise UnsupportedModelError(f"{op._schema.name}{where}: the program uses an output other than the "
                                        "attention itself (log-sum-exp or RNG state)", fix="use only its result")
    out, query = node.meta["val"][0], bound["query"].meta["val"]
    layout = _dense_order(out)
    if layout is None or tuple(out.shape) != tuple(query.shape[:-1]) + (out.shape[-1],):
        raise UnsupportedModelError(f"{op._schema.name}{where} returns a layout aotcombo does not know "
                                    f"(shape {tuple(out.shape)}, strides {tuple(out.stride())})")
    kwargs = {"layout": layout, "attn_mask": bound.get("attn_bias"),
              "is_causal": bool(bound.get("is_causal", False)), "scale": bound.get("scale")}
    if bound["key"].meta["val"].shape[1] != query.shape[1]:  # un-repeated keys and values (grouped_heads.py)
        kwargs["enable_gqa"] = True
    return g.Extern(op=ATTENTION, args=_to_plain((bound["query"], bound["key"], bound["value"])),
                    kwargs=tuple((key, _to_plain(value)) for key, value in kwargs.items()),
                    out=node.name, writes=(), aliases=())


def _over_the_loaded_group(op: torch._ops.OpOverload, args: tuple, kwargs: tuple) -> tuple[tuple, tuple]:
    """A collective's arguments with its process group (the trace's fake one, by name) as
    ``Const("group")``: the group the package is loaded in (``runtime/parallel.py``)."""
    if op._schema.name.partition("::")[2] not in PACKAGED:
        raise UnsupportedModelError(f"the program calls the collective {op_name(op)}; a tensor-parallel package "
                                    "makes all-reduces and all-gathers only",
                                    fix="split the model with ColwiseParallel / RowwiseParallel layers only")
    names = [a.name for a in op._schema.arguments]
    group = g.Const("group", "world")
    args = tuple(group if i < len(names) and names[i] == "group_name" else a for i, a in enumerate(args))
    kwargs = tuple((k, group if k == "group_name" else v) for k, v in kwargs)
    return args, kwargs


# Names the package's program defines itself (templates/program.py.j2): a value of the
# same name would shadow them.
_PROGRAM_NAMES = frozenset({"torch", "empty_strided", "as_strided", "aten", "kernels", "weights", "device", "forward",
                            "aotcombo_group"})


def graph_from_fx(gm, kernels, input_meta, arch, dynamic=None) -> g.Graph:
    axes = axis_symbols(gm, input_meta, dynamic)
    for node in gm.graph.nodes:
        if node.name in _PROGRAM_NAMES:
            node._rename(f"{node.name}_value")
    ops: list[g.Op] = []
    inputs: list[g.Input] = []
    specs: dict[str, g.TensorSpec] = {}
    outputs: tuple = ()
    placeholders = iter(input_meta)
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            specs[node.name] = _spec(val, axes)
        if node.op == "placeholder":
            kind, key = next(placeholders)
            inputs.append(g.Input(node.name, specs[node.name], kind, key))
        elif node.op == "output":
            result = node.args[0]
            result = result if isinstance(result, (list, tuple)) else [result]
            outputs = tuple(r.name if r is not None else None for r in result)
        elif node.op != "call_function":
            raise UnsupportedModelError(f"unexpected wrapper node {node.format_node()}")
        elif node.target is launch_marker:
            ops.append(g.Launch(node.args[0], tuple(_to_plain(a) for a in node.args[1:])))
        elif node.target is torch.empty_strided:
            ops.append(g.Alloc(node.name, _traced_spec(val, *node.args)))
        elif node.target is torch.as_strided:
            ops.append(g.View(node.name, node.args[0].name, _traced_spec(val, *node.args[1:])))
        elif (scalar := _scalar(node)) is not None:
            ops.append(scalar)
        elif node.target is operator.getitem:
            ops.append(g.GetItem(node.name, node.args[0].name, int(node.args[1])))
        elif (attention := _attention(node)) is not None:
            ops.append(attention)
        elif isinstance(node.target, torch._ops.OpOverload):
            op = node.target
            try:
                args = _to_plain(tuple(node.args))
                kwargs = tuple((k, _to_plain(v)) for k, v in node.kwargs.items())
            except UnsupportedModelError as exc:
                raise UnsupportedModelError(f"{exc.message}, passed to {target_name(op)}", exc.fix) from None
            if op.namespace == COLLECTIVES:
                args, kwargs = _over_the_loaded_group(op, args, kwargs)
            ops.append(
                g.Extern(
                    op=op_name(op),
                    args=args,
                    kwargs=kwargs,
                    out=node.name if node.users or not op._schema.returns == [] else None,
                    writes=tuple(_written_args(op, node.args, node.kwargs)),
                    aliases=tuple(_aliased_args(op, node.args, node.kwargs)),
                )
            )
        else:
            raise UnsupportedModelError(
                f"the compiled program calls {getattr(node.target, '__name__', node.target)!r}, "
                "which aotcombo cannot package"
            )
    return g.Graph(
        arch=arch,
        inputs=tuple(inputs),
        ops=tuple(ops),
        kernels=tuple(kernels.values()),
        outputs=outputs,
        specs=tuple(specs.items()),
    )


def output_structure(spec) -> tuple:
    """A pytree spec as plain nested tuples: ``("leaf",)``, ``("tuple", children)``,
    ``("list", children)``, ``("dict", keys, children)``, ``("ordered_dict", keys, children)``
    (torchvision's segmentation and detection heads return one), ``("none",)``."""
    if spec.is_leaf():
        return ("leaf",)
    children = tuple(output_structure(c) for c in spec.children())
    if spec.type is type(None):
        return ("none",)
    if spec.type is dict or _is_model_output(spec.type):  # a transformers ModelOutput comes back as a dict
        return ("dict", tuple(spec.context), children)
    if spec.type is collections.OrderedDict:
        return ("ordered_dict", tuple(spec.context), children)
    if spec.type is list:
        return ("list", children)
    if getattr(spec.type, "__module__", "") == "torch.return_types":
        return ("structseq", f"torch.return_types.{spec.type.__name__}", children)
    if spec.type is tuple or (isinstance(spec.type, type) and issubclass(spec.type, tuple)):
        return ("tuple", children)
    raise UnsupportedModelError(
        f"the model returns a {spec.type.__name__}; aotcombo packages tensors in (nested) tuples, lists, dicts "
        "and OrderedDicts",
        fix="return a tuple or dict of tensors from forward()",
    )


def _is_model_output(kind) -> bool:
    """A transformers ``ModelOutput`` (an OrderedDict whose pytree context is its keys)."""
    return isinstance(kind, type) and any(c.__name__ == "ModelOutput" and c.__module__.startswith("transformers.")
                                          for c in kind.__mro__)


def real_tensor(module: torch.nn.Module, dotted: str, constants: dict) -> torch.Tensor:
    """The real value of a weight: a module attribute, or a tensor literal of
    ``forward`` that export lifted (kept real on the CPU under the fake mode)."""
    from torch._subclasses.fake_tensor import FakeTensor

    try:
        return operator.attrgetter(dotted)(module).detach()
    except AttributeError:
        value = constants.get(dotted)
        if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
            return value.detach().clone()
        raise UnsupportedModelError(
            f"cannot recover the value of constant {dotted!r} the model creates in forward",
            fix="register it as a buffer in __init__ (self.register_buffer(...))",
        ) from None


PACKAGED_NAMESPACES = ("aten", "aotcombo", COLLECTIVES)  # torch's own ops; ours are lowered to kernels after the trace


def refuse_other_libraries_ops(graph: g.Graph, exported: torch.fx.GraphModule) -> None:
    """Raise for a call the package would make to another library's custom op (transformers',
    torchvision's, a user's extension): a package runs with torch alone, where that op is not
    registered. Names the op and, from the exported graph, the model's line that calls it."""
    for op in graph.ops:
        namespace = op.op.partition("::")[0] if isinstance(op, g.Extern) else None
        if namespace is None or namespace in PACKAGED_NAMESPACES:
            continue
        node = next((n for n in exported.graph.nodes if isinstance(n.target, torch._ops.OpOverload)
                     and op_name(n.target) == op.op), None)
        raise UnsupportedModelError(
            f"the model calls {op.op}{node_where(node) if node is not None else ''}, a custom op that another "
            f"library registers (namespace {namespace!r}): a package runs with torch alone, without that library, "
            "so it cannot make that call",
            fix="compute it with torch ops in the model (a library's layer often has an implementation that does, "
            "chosen by its config), or leave that layer out of the model you build",
        )
