"""Inductor on the exported program as it stands, without AOTAutograd tracing it again.

``ep.run_decompositions`` and ``compile_fx`` each hand the program to AOTAutograd, which runs
it twice under fake tensors (once to learn its mutations and aliases, once to record the
functional graph with the decompositions applied). An exported program that mutates nothing
is functional ATen already, with its fake value on every node: those four traces redo what
export did, and with dynamic axes each op's symbolic sizes make them slow. Here only the
nodes a trace would decompose are traced, each alone on its fake arguments (once per distinct
op and argument sizes: a model's repeated layers share it), and spliced in its place:

- ``decompose_exported``: what ``run_decompositions(table)`` makes, where nothing is mutated;
- ``compile_without_retrace``: Inductor's decompositions, then what ``compile_fx`` calls on
  AOTAutograd's graph (``compile_fx_forward``: the joint-graph passes, the outputs' strides,
  ``compile_fx_inner``).

BERT-base (fp16, ``--weights external --arch sm_90``, 2 CPUs), the trace stage: 6.4-10.4 ->
4.8-6.6 s for 8 x 128, 15.1-20.3 -> 8.9-10.3 s with ``--dynamic batch=1:32,seq=1:512``; the
same kernels (``tests/unit/test_direct_compile.py``).
"""

from __future__ import annotations

import functools
import operator

import torch
from torch.fx import Graph, GraphModule, Node
from torch.utils import _pytree as pytree

from .guard_records import tracing


def compile_without_retrace(gm: GraphModule, fake_inputs: list, decompositions: dict | None = None) -> None:
    """Inductor's compile of ``gm`` (functional ATen, fake values on its nodes) for inference;
    ``decompositions``: ours, taking the place of Inductor's for their ops."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._dynamo.utils import detect_fake_mode
    from torch._guards import TracingContext, tracing
    from torch._inductor import compile_fx as fx
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.virtualized import V
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake_mode = detect_fake_mode(fake_inputs) or FakeTensorMode()
    table = _before(decompositions or {}, select_decomp_table())
    inner = functools.partial(fx.compile_fx_inner, get_decomp_fn=lambda: table, cpp_wrapper=False, fx_wrapper=True)
    try:
        with V.set_fake_mode(fake_mode), enable_python_dispatcher():
            decompose(gm, table, fake_mode)
    except Exception:  # noqa: BLE001 - an op whose decomposition fails traced alone: the whole program traced
        fx.compile_fx(gm, fake_inputs, decompositions=table)
        return
    with V.set_fake_mode(fake_mode), tracing(TracingContext(fake_mode)), enable_python_dispatcher(), \
            fx.config.patch(fx.get_cpp_wrapper_config()), V.set_real_inputs(fake_inputs):
        fx.compile_fx_forward(
            gm, fake_inputs, num_orig_model_outputs=fx.get_num_model_outputs(gm), num_example_inputs=len(fake_inputs),
            compiler_config_extra=fx.create_compiler_config_extra(gm), inner_compile=inner, is_inference=True)


def _before(ours: dict, theirs: dict) -> dict:
    """``theirs`` with ``ours`` tried first for their ops: an op ours declines (``NotImplemented``)
    decomposes as in ``theirs`` (Inductor may not be left an op its table decomposes)."""
    def first_of(mine, fallback):
        def decompose(*args, **kwargs):
            out = mine(*args, **kwargs)
            return fallback(*args, **kwargs) if out is NotImplemented else out
        return decompose

    return {**theirs, **{op: first_of(fn, theirs[op]) if op in theirs else fn for op, fn in ours.items()}}


def decompose_exported(ep, table: dict) -> bool:
    """``ep.run_decompositions(table)`` in place, without its two traces, for a program that
    mutates nothing (no functionalization to do): the ops in ``table`` decomposed by it, the
    composite ops export does not keep (``reshape``, ``to``, ``dropout``) by their composite
    kernels, with the composite ops it keeps (``linear``, ``layer_norm``) kept inside them too.
    False, the program untouched, where that does not hold (run ``run_decompositions``)."""
    from torch._export.utils import _collect_all_valid_cia_ops, _special_op_to_preserve_cia
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.export.exported_program import _override_composite_implicit_decomp
    from torch.export.graph_signature import OutputKind

    gm = ep.graph_module
    if any(spec.kind != OutputKind.USER_OUTPUT for spec in ep.graph_signature.output_specs):
        return False
    for node in gm.graph.nodes:
        if node.op == "get_attr" or node.op == "call_function" and (
                isinstance(node.target, torch._ops.HigherOrderOperator)
                or isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable):
            return False
    kept = set(_collect_all_valid_cia_ops()) - set(table)
    values = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    fake_mode = next((v.fake_mode for v in values if isinstance(v, torch._subclasses.FakeTensor)), None)
    if fake_mode is None:
        fake_mode = FakeTensorMode()

    def decomposes(op) -> bool:
        return op in table or _decomposes(op, {}) and op not in kept

    trace = _cached_traces(table, fake_mode)
    try:
        with _override_composite_implicit_decomp({op: _special_op_to_preserve_cia for op in kept}):
            subs = {node: trace(node) for node in gm.graph.nodes
                    if node.op == "call_function" and decomposes(node.target)}
    except Exception:  # noqa: BLE001 - an op whose decomposition fails traced alone: run_decompositions's trace
        return False
    if any(n.op == "get_attr" for sub in subs.values() for n in sub.graph.nodes):
        return False  # a constant it made: run_decompositions lifts those into the signature
    for node, sub in subs.items():
        if not _itself(sub, node.target):
            _splice(gm, node, sub, fake_mode)
    gm.graph.lint()
    gm.recompile()
    return True


def _decomposes(op, table: dict) -> bool:
    """Whether AOTAutograd's trace would decompose ``op``: in ``table``, or composite (no kernel
    of its own: ``aten.linear``, ``aten.reshape``, which the exported program keeps)."""
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if op in table:
        return True
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def decompose(gm: GraphModule, table: dict, fake_mode) -> int:
    """Each node whose op ``table`` (or its composite kernel) decomposes, replaced by the ops its
    decomposition traces to on the node's fake arguments; returns how many were. Every trace is
    made before any node is replaced: a trace that raises leaves ``gm`` as it was."""
    trace = _cached_traces(table, fake_mode)
    subs = {node: trace(node) for node in gm.graph.nodes
            if node.op == "call_function" and _decomposes(node.target, table)}
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        sub = subs.get(node)
        if sub is not None and not _itself(sub, node.target):
            _splice(gm, node, sub)  # the values Inductor's own propagation replaces
            count += 1
        elif isinstance(node.target, torch._ops.OpOverload):
            node.meta.setdefault("original_aten", node.target)  # Inductor names kernels by it
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def _cached_traces(table: dict, fake_mode):
    """``_trace_alone``, once per distinct ``_signature``: a node like one traced before (the same
    op on arguments of the same sizes, strides and dtypes: a model's repeated layers) takes that
    trace, and ``_splice`` propagates its values anew."""
    traced: dict[str, GraphModule] = {}

    def trace(node: Node) -> GraphModule:
        key = _signature(node)
        if key not in traced:
            traced[key] = _trace_alone(node, table, fake_mode)
        return traced[key]

    return trace


def _signature(node: Node) -> str:
    """What a decomposition may read of a node: its op, its constant arguments, and of each Node
    argument its value's kind, sizes, strides, dtype and device (symbolic sizes by name)."""
    def describe(leaf):
        if not isinstance(leaf, Node):
            return repr(leaf)
        val = leaf.meta.get("val")
        if isinstance(val, torch.Tensor):
            return f"T{tuple(val.shape)}{val.stride()}{val.dtype}{val.device}{val.storage_offset()}"
        return f"{type(val).__name__}:{val}"

    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    return f"{node.target}|{spec}|" + "|".join(describe(leaf) for leaf in leaves)


def _itself(sub: GraphModule, op) -> bool:
    """Whether ``sub`` is one call of ``op`` (a decomposition that declined: Inductor's ``add``
    for real tensors)."""
    calls = [n for n in sub.graph.nodes if n.op == "call_function"]
    return len(calls) == 1 and calls[0].target is op


def _trace_alone(node: Node, table: dict, fake_mode) -> GraphModule:
    """The node's op traced by itself, its decompositions applied, its Node arguments the
    graph's placeholders in the order they appear in ``(args, kwargs)``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Node)]

    def run(*values):
        filled = list(leaves)
        for i, value in zip(at, values):
            filled[i] = value
        args, kwargs = pytree.tree_unflatten(filled, spec)
        return node.target(*args, **kwargs)

    with fake_mode, torch.fx.traceback.preserve_node_meta(), tracing(node):  # original_aten: the op
        return make_fx(run, decomposition_table=table, tracing_mode="real")(*(leaves[i].meta["val"] for i in at))


def _splice(gm: GraphModule, node: Node, sub: GraphModule, fake_mode=None) -> None:
    """``sub``'s nodes in place of ``node``, its placeholders bound to ``node``'s Node arguments.
    With ``fake_mode``, each new node's value is computed on theirs; without, it is the value
    ``sub`` holds (the same sizes: ``_signature``), which nodes spliced from one ``sub`` then
    share until Inductor propagates every value anew (``compile_fx``'s ``fake_tensor_prop``)."""
    leaves = pytree.tree_leaves((node.args, node.kwargs))
    arguments = iter(leaf for leaf in leaves if isinstance(leaf, Node))
    env: dict[Node, object] = {}
    graph: Graph = gm.graph
    result = None
    with graph.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "placeholder":
                env[n] = next(arguments)
            elif n.op == "output":
                result = torch.fx.map_arg(n.args[0], env.__getitem__)
            elif n.op == "get_attr":
                value = getattr(sub, n.target)
                name = _free_attribute(gm, n.target)
                setattr(gm, name, value)
                env[n] = graph.get_attr(name)
                env[n].meta = dict(n.meta)
                if fake_mode is not None and "val" in n.meta:
                    env[n].meta["val"] = fake_mode.from_tensor(value)
            else:
                new = env[n] = graph.node_copy(n, env.__getitem__)
                new.meta = {**{k: v for k, v in node.meta.items() if k not in _VALUES}, **n.meta}
                if isinstance(n.target, torch._ops.OpOverload):
                    new.meta.setdefault("original_aten", n.target)
                if fake_mode is not None:
                    args, kwargs = torch.fx.map_arg((new.args, new.kwargs), lambda a: a.meta["val"])
                    with fake_mode:
                        new.meta["val"] = new.target(*args, **kwargs)
    if isinstance(result, Node) or not isinstance(result, (tuple, list)):
        node.replace_all_uses_with(result)
    else:
        for user in list(node.users):
            if user.target is not operator.getitem:
                raise NotImplementedError(f"{node.target} returns {len(result)} values, read by {user.target}")
            user.replace_all_uses_with(result[user.args[1]])
            graph.erase_node(user)
    graph.erase_node(node)
    for n in reversed([env[n] for n in sub.graph.nodes if n.op not in ("placeholder", "output")]):
        if isinstance(n, Node) and not n.users and not n.is_impure():  # the outputs no one reads
            graph.erase_node(n)


_VALUES = ("val", "tensor_meta", "example_value", "unbacked_bindings")


def _free_attribute(gm: GraphModule, base: str) -> str:
    name, i = base, 0
    while hasattr(gm, name):
        i += 1
        name = f"{base}_decomposed_{i}"
    return name
