"""Linears that take in the norm before them and the pointwise ops after them: one kernel each.

``fuse`` rewrites, in the exported graph before Inductor, each small ``epilogue(norm(x) @ W +
bias)`` (and each linear of a decode step's few rows, bare or not) into one
``aotcombo::fused_linear(x, W, operands, recipe)`` call (``Recipe`` as JSON); after the trace,
``lowering.lower`` replaces each call with a Triton kernel of ours
(``templates/fused_linear.py.j2``): sizes and strides fixed, tiles by ``tiles``, no autotuning.
The norm: ``aten.layer_norm`` or an RMS norm written out with its casts, used by this matmul
only. The matmul: ``linear``, ``addmm`` or ``mm`` by a weight (``W`` or ``W.T``), its C a bias
row or a whole matrix. The epilogue: the pointwise ops after it (``EPILOGUE_OPS``), in float32
on the product rounded to its dtype, whose last value only is used elsewhere; a combined
gate/up's ``silu(gate) * up`` as two products per tile. The limits below (cuBLAS keeps the
rest) come from ``benchmarks/fused_linear_bench.py`` and the zoo on an H100. With dynamic
axes, only in a size class of few tokens (``fuse``'s ``max_tokens``).
"""

from __future__ import annotations

import math
import operator

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..common import cdiv, meta_value, recompiled
from .dynamic_rows import FEW_TOKENS_MAX_WEIGHT_BYTES, rows_bound, rows_contiguous, same_shape
# The custom op the rewrite calls (torch.ops.aotcombo.fused_linear) is registered by recipe.
from .quant import is_dequantize, parts as dequantize_parts
from .recipe import (DECODE_DTYPES, DECODE_MAX_ROWS, FLOAT_DTYPES, FUSED_MAX_FLOPS, FUSED_MAX_FLOPS_FP32,
                     FUSED_MAX_WEIGHT_BYTES, FUSED_MIN_PROGRAMS, GEMV_MAX_ROWS, QUANT_MAX_ROWS, Recipe, tiles)

aten = torch.ops.aten


# --- the rewrite, on the exported graph -------------------------------------------------

_ROW_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
_IGNORED_USERS = (aten._assert_tensor_metadata.default,)  # export's dtype checks: they go with their value
_ROUNDING = {torch.bfloat16: "round_bfloat16", torch.float16: "round_float16", torch.float32: "copy"}


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _users(node) -> list:
    return [u for u in node.users if u.target not in _IGNORED_USERS]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _is_weight(node, placeholders: set) -> bool:
    return isinstance(node, torch.fx.Node) and node in placeholders and _val(node) is not None and _val(node).dim() == 2


def _is_quantized_weight(node, placeholders: set) -> bool:
    """A weight the model dequantizes (``quant_match``): its bytes and scales weights of the program."""
    return is_dequantize(node) and len(_users(node)) == 1 and all(
        a in placeholders for a in node.all_input_nodes)


def _is_cast(node) -> bool:
    """``x.to(dtype)`` (``_to_copy`` with only a dtype) or ``x.type_as(y)``."""
    return isinstance(node, torch.fx.Node) and (
        node.target is aten._to_copy.default and set(node.kwargs) == {"dtype"} and len(node.args) == 1
        or node.target is aten.type_as.default)


def _matmul(node, placeholders: set):
    """``(x, weight, layout, bias, m)`` of a matmul by a weight of the program, or None."""
    args, target = node.args, node.target
    if target is aten.linear.default and not node.kwargs:
        x, weight, bias = (*args, None)[:3]
        if not (_is_weight(weight, placeholders) or _is_quantized_weight(weight, placeholders)):
            return None
        return x, weight, "nk", bias, math.prod(_val(x).shape[:-1])
    if target in (aten.addmm.default, aten.mm.default) and not node.kwargs:
        bias, x, mat2 = (None, *args) if target is aten.mm.default else args
        if _val(x).dim() != 2:
            return None
        if _is_weight(mat2, placeholders):
            return x, mat2, "kn", bias, _val(x).shape[0]
        if (mat2.target is aten.permute.default and list(mat2.args[1]) == [1, 0]
                and _is_weight(mat2.args[0], placeholders) and len(_users(mat2)) == 1):
            return x, mat2.args[0], "nk", bias, _val(x).shape[0]
    return None


def _through_row_views(node, k: int) -> tuple:
    """Back from a matmul's input through views that keep rows of ``k``: (the value, the views)."""
    views = []
    while node.target in _ROW_VIEWS and same_shape(_val(node.args[0]).shape[-1:], (k,)) and len(_users(node)) == 1:
        views.append(node)
        node = node.args[0]
    return node, views


def _layer_norm(node, k: int):
    if node.target is not aten.layer_norm.default or node.kwargs or list(node.args[1]) != [k]:
        return None
    x, _, weight, bias, eps = (*node.args, None, None, 1e-5)[:5]
    return {"kind": "layer", "x": x, "weight": weight, "bias": bias, "eps": float(eps), "cast": None, "nodes": [node]}


def _rms_norm(node, k: int):
    """``w * cast?(xf * rsqrt(mean(xf**2, -1, keepdim=True) + eps))``, xf float32 (``x`` or its cast)."""
    if node.target is not aten.mul.Tensor or len(node.args) != 2:
        return None
    for weight, scaled in (node.args, node.args[::-1]):
        if _val(weight) is not None and same_shape(_val(weight).shape, (k,)) and isinstance(scaled, torch.fx.Node):
            break
    else:
        return None
    nodes, cast = [node], None
    if _is_cast(scaled):
        nodes.append(scaled)
        cast, scaled = _dtype_name(_val(scaled).dtype), scaled.args[0]
    if scaled.target is not aten.mul.Tensor or len(scaled.args) != 2:
        return None
    nodes.append(scaled)
    for xf, rsqrt in (scaled.args, scaled.args[::-1]):
        if isinstance(rsqrt, torch.fx.Node) and rsqrt.target is aten.rsqrt.default:
            break
    else:
        return None
    add = rsqrt.args[0]
    if (add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs
            or not isinstance(add.args[1], (int, float))):
        return None
    mean = add.args[0]
    if (mean.target is not aten.mean.dim or list(mean.args[1]) not in ([-1], [_val(mean.args[0]).dim() - 1])
            or not (mean.args[2:3] == (True,) or mean.kwargs.get("keepdim")) or mean.kwargs.get("dtype")):
        return None
    square = mean.args[0]
    if square.target is not aten.pow.Tensor_Scalar or square.args != (xf, 2) or _val(xf).dtype != torch.float32:
        return None
    nodes += [rsqrt, add, mean, square]
    x = xf
    if _is_cast(xf):
        x = xf.args[0]
        nodes.append(xf)
    inside = set(nodes)
    if any(u not in inside for n in nodes[1:] for u in _users(n)):
        return None
    return {"kind": "rms", "x": x, "weight": weight, "bias": None, "eps": float(add.args[1]), "cast": cast,
            "nodes": nodes}


def _epilogue_op(node):
    """``(op, operands)`` of a pointwise node the epilogue can take, or None."""
    t, args, kwargs = node.target, node.args, node.kwargs
    if t in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar):
        if len(args) != 2 or kwargs.get("alpha", 1) != 1 or set(kwargs) - {"alpha"}:
            return None
        return ("add" if t in (aten.add.Tensor, aten.add.Scalar) else "sub"), list(args)
    simple = {aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.div.Tensor: "div", aten.div.Scalar: "div",
              aten.rsub.Scalar: "rsub", aten.rsub.Tensor: "rsub", aten.neg.default: "neg",
              aten.tanh.default: "tanh", aten.erf.default: "erf", aten.exp.default: "exp",
              aten.sigmoid.default: "sigmoid", aten.relu.default: "relu", aten.silu.default: "silu",
              aten.clone.default: "copy"}
    if t in simple:
        if (set(kwargs) - {"memory_format"}) or t in (aten.rsub.Scalar, aten.rsub.Tensor) and len(args) != 2:
            return None
        return simple[t], list(args)
    if t is aten.pow.Tensor_Scalar and isinstance(args[1], (int, float)):
        return {2: ("square", [args[0]]), 3: ("cube", [args[0]])}.get(args[1], ("pow", list(args)))
    if t is aten.gelu.default:
        approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        return ("gelu" if approximate == "none" else "gelu_tanh"), [args[0]]
    if _is_cast(node) and _val(node).dtype in _ROUNDING:
        return _ROUNDING[_val(node).dtype], [args[0]]
    return None


def _halves(matmul, n: int):
    """``(first, second, between)`` when the matmul's users only slice or chunk its columns in
    halves (a combined gate/up), ``between`` the nodes that go with it; else None."""
    users, last_dim = _users(matmul), _val(matmul).dim() - 1
    if n % 2:
        return None
    if len(users) == 1 and users[0].target in (aten.split.Tensor, aten.split_with_sizes.default):
        split = users[0]
        size, dim = (*split.args[1:], 0)[:2]
        pieces = _users(split)
        if (split.kwargs or dim not in (-1, last_dim) or size not in (n // 2, [n // 2, n // 2]) or len(pieces) != 2
                or any(p.target is not operator.getitem for p in pieces)):
            return None
        by_index = {p.args[1]: p for p in pieces}
        return (by_index[0], by_index[1], [split]) if set(by_index) == {0, 1} else None
    spans = {}
    for u in users:
        if u.target is not aten.slice.Tensor or u.kwargs:
            return None
        defaults = (0, None, None, 1)  # dim, start, end, step
        dim, start, end, step = (*u.args[1:], *defaults[len(u.args) - 1:])
        if dim not in (-1, last_dim) or step != 1:
            return None
        spans[(start or 0, n if end is None else min(end, n))] = u
    if len(users) != 2 or set(spans) != {(0, n // 2), (n // 2, n)}:
        return None
    return spans[(0, n // 2)], spans[(n // 2, n)], []


def _grow_epilogue(graph, roots: dict, matmul, order: dict, m, n: int):
    """``(steps, extras, last)``: the pointwise ops after ``roots`` (the [m, n] product or its
    halves) one kernel can take, with (op, operands), the extra tensors read, and the node
    stored; None when no op follows."""
    members: dict = dict.fromkeys(roots)
    extras: list = []
    first = max(order[r] for r in roots)
    for node in graph.nodes:
        if order[node] <= first or node.op != "call_function" or order[node] > first + 64:
            continue
        val = _val(node)
        if (not isinstance(val, torch.Tensor) or not val.is_floating_point() or val.dim() == 0
                or not statically_known_true(val.numel() == m * n) or not statically_known_true(val.shape[-1] == n)):
            continue
        if node.target in _ROW_VIEWS and node.args[0] in members:
            members[node] = ("copy", [node.args[0]])
            continue
        step = _epilogue_op(node)
        if step is None or not any(a in members for a in step[1] if isinstance(a, torch.fx.Node)):
            continue
        fits = True
        for a in step[1]:
            if isinstance(a, torch.fx.Node) and a not in members:
                e = _val(a)
                # computed before the matmul (so not from it), a whole [m, n] or an [n] row
                if order[a] >= order[matmul] or not isinstance(e, torch.Tensor) or _dtype_name(
                        e.dtype) not in FLOAT_DTYPES or not (same_shape(e.shape, val.shape)
                                                            or e.dim() > 0 and same_shape(e.shape[-1:], (n,))
                                                            and statically_known_true(e.numel() == n)):
                    fits = False
            elif not isinstance(a, (torch.fx.Node, int, float)) or isinstance(a, bool):
                fits = False
        if fits:
            members[node] = step
            extras += [a for a in step[1] if isinstance(a, torch.fx.Node) and a not in members and a not in extras]
    # The last member whose region (itself and the members it reads) holds every root and is
    # used only by itself.
    for last in reversed(list(members)):
        if last in roots:
            return None
        region, stack = set(), [last]
        while stack:
            node = stack.pop()
            if node in region:
                continue
            region.add(node)
            if members[node] is not None:
                stack += [a for a in members[node][1] if a in members]
        if all(r in region for r in roots) and all(
                u in region for r in region if r is not last for u in _users(r)):
            steps = [(node, members[node]) for node in members if node in region and node not in roots]
            used = [e for e in extras if any(e in step[1] for _, step in steps)]
            return steps, used, last
    return None


def fuse(ep, max_tokens: int | None = None) -> int:
    """Rewrite, in place in the ExportedProgram ``ep``, each small matmul with a norm before it
    or pointwise ops after it into one ``aotcombo::fused_linear``; returns how many.

    A matmul whose rows are a size of dynamic axes is rewritten only with ``max_tokens``, a
    bound on the product of every dynamic axis (a size class of the build: ``rows_bound``):
    its tiles and grid are sized for the bound, its rows read at run time."""
    from torch.export.graph_signature import InputKind

    graph = ep.graph
    weights = {s.arg.name for s in ep.graph_signature.input_specs
               if s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR, InputKind.BUFFER)}
    placeholders = {n for n in graph.nodes if n.op == "placeholder" and n.name in weights}
    fused = 0
    for node in list(graph.nodes):
        if node.graph is None:  # erased by an earlier rewrite
            continue
        found = _matmul(node, placeholders)
        if found is None:
            continue
        x, weight, layout, bias, rows = found
        n, k = (_val(weight).shape if layout == "nk" else _val(weight).shape[::-1])
        m = rows if isinstance(rows, int) else rows_bound(rows, max_tokens)  # the rows, or their bound
        dtype = _val(weight).dtype
        if m is None or not isinstance(k, int) or rows is not m and (
                n * k * dtype.itemsize > FEW_TOKENS_MAX_WEIGHT_BYTES  # cuBLAS's, measured
                or is_dequantize(weight)):  # quantized weights with dynamic rows: not built yet
            continue
        max_flops = FUSED_MAX_FLOPS_FP32 if dtype == torch.float32 else FUSED_MAX_FLOPS
        few_rows = m <= GEMV_MAX_ROWS or m <= DECODE_MAX_ROWS and dtype in DECODE_DTYPES  # memory-bound
        if is_dequantize(weight):  # ours up to QUANT_MAX_ROWS rows; else quant.expand gives it to Inductor
            few_rows = m <= QUANT_MAX_ROWS
            if not few_rows:
                continue
        if _dtype_name(dtype) not in FLOAT_DTYPES or _val(x).dtype != dtype or not few_rows and (
                2 * m * n * k > max_flops or n * k * dtype.itemsize > FUSED_MAX_WEIGHT_BYTES):
            continue
        bias_kind = None
        if bias is not None:
            b = _val(bias)
            bias_kind = "row" if same_shape(b.shape, (n,)) else "full" if same_shape(b.shape, (rows, n)) else None
            if bias_kind is None:
                continue
        source, views = _through_row_views(x, k)
        norm = _layer_norm(source, k) or _rms_norm(source, k)
        if norm is not None and (len(_users(source)) != 1 or _val(norm["x"]).dtype not in (dtype, torch.float32)):
            norm = None
        order = {nd: i for i, nd in enumerate(graph.nodes)}
        halves = _halves(node, n) if bias_kind != "full" else None
        epilogue = halves and _grow_epilogue(graph, dict(zip(halves[:2], ("acc", "acc_up"))), node, order, rows,
                                             n // 2)
        if not epilogue:
            halves, epilogue = None, _grow_epilogue(graph, {node: "acc"}, node, order, rows, n)
        if not few_rows and norm is None and (epilogue is None or all(op == "copy" for _, (op, _) in epilogue[0])):
            continue  # one launch either way: cuBLAS's (at a few rows ours is faster, split-k pairs included)
        width = n // 2 if halves else n
        t = tiles(m, width, k, _dtype_name(dtype), glu=bool(halves))
        if cdiv(m, t.block_m) * cdiv(width, t.block_n) < FUSED_MIN_PROGRAMS:
            continue
        if rows is not m:  # rows given at run time: x keeps its leading dims, the result must too
            x = norm["x"] if norm else source
            last = epilogue[2] if epilogue else node
            if t.block_m < m or not rows_contiguous(_val(x)) or not same_shape(
                    _val(last).shape, (*_val(x).shape[:-1], width)):
                continue
        _replace(graph, node, x, weight, layout, bias, bias_kind, m, n, k, norm, views, epilogue, halves,
                 dynamic_rows=rows is not m)
        fused += 1
    return recompiled(ep, fused, dead_code=True)


def _replace(graph, matmul, x, weight, layout, bias, bias_kind, m, n, k, norm, views, epilogue, halves,
             dynamic_rows: bool = False) -> None:
    steps, extras, last = epilogue if epilogue is not None else ([], [], matmul)
    names = dict(zip(halves[:2], ("acc", "acc_up"))) if halves else {matmul: "acc"}
    names.update({e: f"e{i}" for i, e in enumerate(extras)})
    program = []
    for i, (node, (op, args)) in enumerate(steps):
        names[node] = f"t{i}"
        program.append((f"t{i}", op, tuple(names[a] if isinstance(a, torch.fx.Node) else float(a) for a in args)))
    out_val = _val(last)
    width = n // 2 if halves else n
    recipe = Recipe(
        m=m, n=width, k=k, weight_layout=layout, bias=bias_kind, glu=bool(halves),
        norm=norm and norm["kind"], eps=norm["eps"] if norm else 0.0,
        norm_weight=bool(norm and norm["weight"] is not None), norm_bias=bool(norm and norm["bias"] is not None),
        norm_cast=norm and norm["cast"],
        extras=tuple("full" if _val(e).dim() > 1 and statically_known_true(_val(e).numel() == _val(last).numel())
                     else "row" for e in extras),
        epilogue=tuple(program), result=names[last],
        dtype=_dtype_name(_val(weight).dtype), out_dtype=_dtype_name(out_val.dtype),
        quant=dequantize_parts(weight)[2] if is_dequantize(weight) else None, dynamic_rows=dynamic_rows,
    )
    operands = ([bias] if bias is not None else []) + (
        [norm[p] for p in ("weight", "bias") if norm[p] is not None] if norm else [])
    kinds = ([bias_kind] if bias is not None else []) + ["row"] * (len(operands) - (bias is not None)) + list(
        recipe.extras)
    with graph.inserting_before(last):
        # dynamic rows: x keeps its leading dims (the op flattens them), "full" operands are [-1, n]
        rows, source = (-1, norm["x"] if norm else x) if dynamic_rows else (m, None)
        made = [] if dynamic_rows else [graph.call_function(aten.reshape.default, (norm["x"] if norm else x, [m, k]))]
        for e, kind in zip(operands + extras, kinds):
            made.append(graph.call_function(aten.reshape.default, (
                e, [rows, width if e in extras else n] if kind == "full" else [-1])))
        # a quantized weight: its bytes in W's place, its scale (and zero) first among the operands
        weight, quantized = dequantize_parts(weight)[:2] if recipe.quant else (weight, [])
        made = [source, *made] if dynamic_rows else made
        call = graph.call_function(torch.ops.aotcombo.fused_linear.default,
                                   (made[0], weight, quantized + made[1:], recipe.to_json()))
        result = call if dynamic_rows else graph.call_function(aten.reshape.default, (call, list(out_val.shape)))
    for node in dict.fromkeys((*made[dynamic_rows:], call, result)):
        node.meta["val"] = node.target(*(meta_value(a) for a in node.args))
    result.meta.update({key: value for key, value in last.meta.items() if key != "val"})
    call.meta.update({key: value for key, value in matmul.meta.items() if key != "val"})
    last.replace_all_uses_with(result)
    dead = [s for s, _ in steps][::-1] + ([*halves[:2], *halves[2]] if halves else []) + [matmul] + views + (
        norm["nodes"] if norm else []) + [a for a in matmul.args[1:2] if is_dequantize(a)]
    for node in dead:
        for user in list(node.users):
            if user.target in _IGNORED_USERS:
                graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)
