"""Linears that take in the norm before them and the pointwise ops after them: one kernel each.

``fuse`` rewrites, in the exported graph before Inductor, each small ``epilogue(norm(x) @ W +
bias)`` (and each linear of a decode step's few rows, bare or not) into one
``aotcombo::fused_linear(x, W, operands, recipe)`` call (``Recipe`` as JSON); after the trace,
``fused_linear_kernels.lower`` replaces each call with a Triton kernel of ours
(``templates/fused_linear.py.j2``): sizes and strides fixed, tiles by ``tiles``, no autotuning.
The norm: ``aten.layer_norm`` or an RMS norm written out with its casts, used by this matmul
only. The matmul: ``linear``, ``addmm`` or ``mm`` by a weight (``W`` or ``W.T``), its C a bias
row or a whole matrix. The epilogue: the pointwise ops after it (``EPILOGUE_OPS``), in float32
on the product rounded to its dtype, whose last value only is used elsewhere; a combined
gate/up's ``silu(gate) * up`` as two products per tile. The limits below (cuBLAS keeps the
rest) come from ``benchmarks/fused_linear_bench.py`` and the zoo on an H100. Not with a
dynamic batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
from dataclasses import dataclass

import torch

from . import graph as g

OP = "aotcombo::fused_linear"
# benchmarks/results/fused_linear_bench.log: fused beats norm + cuBLAS + epilogue 1.2-2.7x up
# to 0.13 GFLOP, loses 0.5-0.8x from 0.45 GFLOP. float32 (tf32x3) lower: in place the fp32 GPT-2
# block ran 0.069 -> 0.091 ms fused (zoo/zoo_bench_fp32.log). Weights over 2 MiB: the LLM decode
# step went 0.338 -> 0.356 ms fused (llm_bench_fused.log). Under 16 programs a few programs walk
# the whole k loop (DLRM's 8-row MLP: 0.042 -> 0.053 ms); every win measured had 18 or more.
FUSED_MAX_FLOPS = 2 ** 27  # 2*M*N*K
FUSED_MAX_FLOPS_FP32 = 2 ** 24
FUSED_MAX_WEIGHT_BYTES = 2 ** 21
FUSED_MIN_PROGRAMS = 16
MIN_PROGRAMS = 64  # the tile rule shrinks tiles until the grid has this many programs
# A matmul of one row, or of up to DECODE_MAX_ROWS rows in 16 bits (an LLM decode step), reads
# each weight element for a few products: memory-bound whatever its FLOPs or weight bytes, so
# it is ours, bare or not (tiles()). H100, llm_decode (results/fused_linear_bench_decode*.log,
# results/llm_gemv/): one row, a GEMV of 4 columns x k in steps of up to 1024 (float32 too: exact
# products, no shared memory; not timed): 1.4-1.9x cuBLAS's speed for 2-6 MB of bf16 weights,
# even at 65 MB (the lm head), batch-1 step 0.19 -> 0.155 ms; 2-8 rows (the GEMV's [8, 4, 1024]
# products spill there), tensor-core tiles of 16 x 32 x 256: steps at batch 4 and 8 1.1x faster.
GEMV_MAX_ROWS, GEMV_BLOCK_N, GEMV_MAX_BLOCK_K = 1, 4, 1024
DECODE_MAX_ROWS, DECODE_BLOCK_N, DECODE_MAX_BLOCK_K = 8, 32, 256
DECODE_DTYPES = (torch.bfloat16, torch.float16)
# float32 products as three tf32 ones (tensor cores): 1.2-1.8e-7 from float64, below the
# 2.4-4.1e-7 of Triton's "ieee" dot, and 1.7-3x faster.
FP32_DOT_PRECISION = "tf32x3"
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
TRITON_DTYPE = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32"}
POINTER_TYPE = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}

aten = torch.ops.aten


@dataclass(frozen=True)
class Recipe:
    """What one fused linear computes; operands follow x and W in this order: the bias, the
    norm's weight and bias (those present), then ``extras``."""

    m: int
    n: int
    k: int
    weight_layout: str  # "nk": a linear's weight [N, K]; "kn": addmm's mat2 [K, N]
    bias: str | None  # None | "row" ([N]) | "full" ([M, N], addmm's C): added before rounding
    glu: bool  # W has 2N rows: two products, "acc" by its first N rows and "acc_up" by its last N
    norm: str | None  # None | "layer" | "rms"
    eps: float
    norm_weight: bool
    norm_bias: bool
    norm_cast: str | None  # rms: the dtype the normalized x is rounded to before the weight scales it
    extras: tuple[str, ...]  # per extra operand: "full" | "row"
    epilogue: tuple[tuple[str, str, tuple], ...]  # (value, op, args): args are values, "e<i>", numbers
    result: str  # the value stored ("acc": the product itself)
    dtype: str  # of x, W and their product
    out_dtype: str  # of the value stored

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Recipe":
        raw = json.loads(text)
        raw["extras"] = tuple(raw["extras"])
        raw["epilogue"] = tuple((v, op, tuple(args)) for v, op, args in raw["epilogue"])
        return cls(**raw)


@torch.library.custom_op(OP, mutates_args=())
def fused_linear(x: torch.Tensor, weight: torch.Tensor, operands: list[torch.Tensor], recipe: str) -> torch.Tensor:
    """The recipe in torch ops (eager, any device): the meaning ``lower``'s kernel implements."""
    r = Recipe.from_json(recipe)
    operands = list(operands)
    take = operands.pop
    bias = take(0) if r.bias else None
    a = x.float()
    if r.norm == "layer":
        a = (a - a.mean(-1, keepdim=True)) * torch.rsqrt(a.var(-1, unbiased=False, keepdim=True) + r.eps)
    elif r.norm == "rms":
        a = a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + r.eps)
    if r.norm and r.norm_cast:
        a = a.to(getattr(torch, r.norm_cast)).float()
    if r.norm_weight:
        a = a * take(0).float()
    if r.norm_bias:
        a = a + take(0).float()
    w = weight.float() if r.weight_layout == "kn" else weight.float().t()
    acc = a.to(weight.dtype).float() @ w
    if bias is not None:
        acc = acc + bias.float()
    acc = acc.to(weight.dtype).float()
    values = {"acc": acc[:, :r.n], "acc_up": acc[:, r.n:]} if r.glu else {"acc": acc}
    values.update({f"e{i}": e.float() for i, e in enumerate(operands)})
    for out, op, args in r.epilogue:
        values[out] = EPILOGUE_OPS[op][1](*(values[a] if isinstance(a, str) else a for a in args))
    return values[r.result].to(getattr(torch, r.out_dtype))


@fused_linear.register_fake
def _(x, weight, operands, recipe):
    r = Recipe.from_json(recipe)
    return x.new_empty((r.m, r.n), dtype=getattr(torch, r.out_dtype))


# op -> (Triton expression on float32 values, the same in torch)
EPILOGUE_OPS = {
    "add": ("{0} + {1}", lambda a, b: a + b),
    "sub": ("{0} - {1}", lambda a, b: a - b),
    "rsub": ("{1} - {0}", lambda a, b: b - a),
    "mul": ("{0} * {1}", lambda a, b: a * b),
    "div": ("{0} / {1}", lambda a, b: a / b),
    "neg": ("-{0}", lambda a: -a),
    "square": ("{0} * {0}", lambda a: a * a),
    "cube": ("{0} * {0} * {0}", lambda a: a * a * a),
    "pow": ("libdevice.pow({0}, {1})", lambda a, e: torch.pow(a, e)),
    "tanh": ("libdevice.tanh({0})", torch.tanh),
    "erf": ("libdevice.erf({0})", torch.erf),
    "exp": ("libdevice.exp({0})", torch.exp),
    "sigmoid": ("tl.sigmoid({0})", torch.sigmoid),
    "relu": ("tl.where({0} != {0}, {0}, tl.maximum({0}, 0.0))", torch.relu),
    "silu": ("{0} * tl.sigmoid({0})", torch.nn.functional.silu),
    "gelu": ("0.5 * {0} * (1.0 + libdevice.erf({0} * 0.7071067811865476))", torch.nn.functional.gelu),
    "gelu_tanh": ("0.5 * {0} * (1.0 + libdevice.tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))",
                  lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    "round_bfloat16": ("{0}.to(tl.bfloat16).to(tl.float32)", lambda a: a.bfloat16().float()),
    "round_float16": ("{0}.to(tl.float16).to(tl.float32)", lambda a: a.half().float()),
    "copy": ("{0}", lambda a: a),
}


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
        if not _is_weight(weight, placeholders):
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
    while node.target in _ROW_VIEWS and _val(node.args[0]).shape[-1] == k and len(_users(node)) == 1:
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
        if _val(weight) is not None and tuple(_val(weight).shape) == (k,) and isinstance(scaled, torch.fx.Node):
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
    if add.target is not aten.add.Tensor or len(add.args) != 2 or add.kwargs or not isinstance(add.args[1], (int, float)):
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


def _grow_epilogue(graph, roots: dict, matmul, order: dict, m: int, n: int):
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
        if not isinstance(val, torch.Tensor) or not val.is_floating_point() or val.numel() != m * n or val.shape[-1] != n:
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
                        e.dtype) not in FLOAT_DTYPES or not (tuple(e.shape) == tuple(val.shape)
                                                            or e.numel() == n and e.shape[-1] == n):
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


def fuse(ep) -> int:
    """Rewrite, in place in the ExportedProgram ``ep``, each small matmul with a norm before it
    or pointwise ops after it into one ``aotcombo::fused_linear``; returns how many."""
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
        x, weight, layout, bias, m = found
        n, k = (_val(weight).shape if layout == "nk" else _val(weight).shape[::-1])
        dtype = _val(weight).dtype
        max_flops = FUSED_MAX_FLOPS_FP32 if dtype == torch.float32 else FUSED_MAX_FLOPS
        few_rows = m <= GEMV_MAX_ROWS or m <= DECODE_MAX_ROWS and dtype in DECODE_DTYPES  # memory-bound
        if _dtype_name(dtype) not in FLOAT_DTYPES or _val(x).dtype != dtype or any(
                isinstance(s, torch.SymInt) for s in (*_val(x).shape, m)) or not few_rows and (
                2 * m * n * k > max_flops or n * k * dtype.itemsize > FUSED_MAX_WEIGHT_BYTES):
            continue
        bias_kind = None
        if bias is not None:
            b = _val(bias)
            bias_kind = "row" if tuple(b.shape) == (n,) else "full" if tuple(b.shape) == (m, n) else None
            if bias_kind is None:
                continue
        source, views = _through_row_views(x, k)
        norm = _layer_norm(source, k) or _rms_norm(source, k)
        if norm is not None and (len(_users(source)) != 1 or _val(norm["x"]).dtype not in (dtype, torch.float32)):
            norm = None
        order = {nd: i for i, nd in enumerate(graph.nodes)}
        halves = _halves(node, n) if bias_kind != "full" else None
        epilogue = halves and _grow_epilogue(graph, dict(zip(halves[:2], ("acc", "acc_up"))), node, order, m, n // 2)
        if not epilogue:
            halves, epilogue = None, _grow_epilogue(graph, {node: "acc"}, node, order, m, n)
        if not few_rows and norm is None and (epilogue is None or all(op == "copy" for _, (op, _) in epilogue[0])):
            continue  # one launch either way: cuBLAS's (at a few rows ours is faster, split-k pairs included)
        width = n // 2 if halves else n
        t = tiles(m, width, k, _dtype_name(dtype))
        if _cdiv(m, t.block_m) * _cdiv(width, t.block_n) < FUSED_MIN_PROGRAMS:
            continue
        _replace(graph, node, x, weight, layout, bias, bias_kind, m, n, k, norm, views, epilogue, halves)
        fused += 1
    if fused:
        graph.eliminate_dead_code()
        graph.lint()
        ep.graph_module.recompile()
    return fused


def _replace(graph, matmul, x, weight, layout, bias, bias_kind, m, n, k, norm, views, epilogue, halves) -> None:
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
        extras=tuple("full" if _val(e).dim() > 1 and _val(e).numel() == m * width else "row" for e in extras),
        epilogue=tuple(program), result=names[last],
        dtype=_dtype_name(_val(weight).dtype), out_dtype=_dtype_name(out_val.dtype),
    )
    operands = ([bias] if bias is not None else []) + (
        [norm[p] for p in ("weight", "bias") if norm[p] is not None] if norm else [])
    kinds = ([bias_kind] if bias is not None else []) + ["row"] * (len(operands) - (bias is not None)) + list(
        recipe.extras)
    with graph.inserting_before(last):
        made = [graph.call_function(aten.reshape.default, (norm["x"] if norm else x, [m, k]))]
        for e, kind in zip(operands + extras, kinds):
            made.append(graph.call_function(aten.reshape.default, (e, [m, width if e in extras else n] if kind == "full"
                                                                    else [-1])))
        call = graph.call_function(torch.ops.aotcombo.fused_linear.default,
                                   (made[0], weight, made[1:], recipe.to_json()))
        result = graph.call_function(aten.reshape.default, (call, list(out_val.shape)))
    for node in (*made, call, result):
        node.meta["val"] = node.target(*(_meta_args(a) for a in node.args))
    result.meta.update({key: value for key, value in last.meta.items() if key != "val"})
    call.meta.update({key: value for key, value in matmul.meta.items() if key != "val"})
    last.replace_all_uses_with(result)
    dead = [s for s, _ in steps][::-1] + ([*halves[:2], *halves[2]] if halves else []) + [matmul] + views + (
        norm["nodes"] if norm else [])
    for node in dead:
        for user in list(node.users):
            if user.target in _IGNORED_USERS:
                graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)


def _meta_args(a):
    if isinstance(a, torch.fx.Node):
        return _val(a)
    if isinstance(a, (list, tuple)):
        return type(a)(_meta_args(v) for v in a)
    return a


# --- the kernels, after the trace -------------------------------------------------------

@dataclass(frozen=True)
class Tiles:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    gemv: bool = False  # products summed on the CUDA cores, all rows in one tile (tl.dot: False)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def tiles(m: int, n: int, k: int, dtype: str) -> Tiles:
    """Tiles by rule (the fastest configs measured, for parallelism). Up to ``GEMV_MAX_ROWS``
    rows: a GEMV, all rows in one tile, ``GEMV_BLOCK_N`` columns, k steps of up to
    ``GEMV_MAX_BLOCK_K``; 16-bit, up to ``DECODE_MAX_ROWS``: 16 x ``DECODE_BLOCK_N``, k steps of
    up to ``DECODE_MAX_BLOCK_K``; both 4 warps, 3 stages. Else 64 x 64 (16 rows for float32),
    shrunk rows first to 16, then columns to 32, while under ``MIN_PROGRAMS`` programs; k
    steps of 64, 128 for few rows or a k of 128 (float32: 32); 4 warps; 3 stages (float32: 2)."""
    wide = dtype != "float32"
    if m <= GEMV_MAX_ROWS:
        block_k = min(_next_power_of_2(k), GEMV_MAX_BLOCK_K)
        return Tiles(_next_power_of_2(m), GEMV_BLOCK_N, block_k, num_warps=4, num_stages=3, gemv=True)
    if wide and m <= DECODE_MAX_ROWS:
        block_k = min(_next_power_of_2(k), DECODE_MAX_BLOCK_K)
        return Tiles(16, DECODE_BLOCK_N, block_k, num_warps=4, num_stages=3)
    block_m, block_n = min(64 if wide else 16, max(16, _next_power_of_2(m))), min(64, max(32, _next_power_of_2(n)))
    while _cdiv(m, block_m) * _cdiv(n, block_n) < MIN_PROGRAMS and block_m > 16:
        block_m //= 2
    while _cdiv(m, block_m) * _cdiv(n, block_n) < MIN_PROGRAMS and block_n > 32:
        block_n //= 2
    block_k = (128 if m <= 16 or k <= 128 else 64) if wide else 32
    return Tiles(block_m=block_m, block_n=block_n, block_k=min(block_k, max(16, _next_power_of_2(k))),
                 num_warps=4, num_stages=3 if wide else 2)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
