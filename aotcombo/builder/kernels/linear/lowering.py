"""Fused linears after the trace: each ``aotcombo::fused_linear`` call (``match``)
becomes a Triton kernel of ours, rendered from ``templates/fused_linear.py.j2`` with every size
and stride fixed and the tiles of ``recipe.tiles``: a tiled matmul on the tensor cores,
or for a few rows (an LLM decode step) a GEMV that streams W once."""

from __future__ import annotations

import hashlib
import math

import sympy

from ....runtime.manifest import ITEMSIZE
from ... import graph as g
from ...codegen.render import render
from ..common import POINTER_TYPE, TRITON_DTYPE, cdiv
from . import quant_gemv
from . import recipe as recipes  # FP32_DOT_PRECISION read at each call: benchmarks/fused_linear_bench.py sets it
from .recipe import EPILOGUE_OPS, GEMV_MAX_ROWS, OP, Recipe, Tiles, tiles


def _number(value: float) -> str:
    if math.isinf(value) or math.isnan(value):
        return f"float('{value}')"
    return repr(float(value))


def _aligned(spec: g.TensorSpec) -> bool:
    return spec.storage_offset * ITEMSIZE[spec.dtype] % 16 == 0


def row_stride(x: g.TensorSpec) -> int | str | None:
    """The stride between ``x``'s rows (its dims but the last, flattened): that of the innermost of
    them longer than 1 (a dim of size 1 has any stride: Inductor may lay a [batch, 1, k] view out
    as (k, batch * k, 1)), None where they are not at one stride; ``k`` for a single row."""
    def expr(value):  # an int, an expression of the axes' names, or a Ref to a Scalar
        return sympy.Symbol(value.name) if isinstance(value, g.Ref) else sympy.sympify(value)

    dims = [(size, stride) for size, stride in zip(x.shape[:-1], x.stride[:-1]) if size != 1]
    for (_, outer), (size, inner) in zip(dims, dims[1:]):
        if sympy.simplify(expr(outer) - expr(inner) * expr(size)) != 0:
            return None
    return dims[-1][1] if dims else x.shape[-1]


def kernel_for(op: g.Extern, specs: dict, config: Tiles | None = None) -> tuple[g.Kernel, tuple]:
    """The kernel of one ``aotcombo::fused_linear`` call (``tiles``, or ``config``), and its args."""
    x, weight, operands, text = op.args
    r = Recipe.from_json(text)
    spec = {name: specs[name] for name in [x.name, weight.name, *(o.name for o in operands), op.out]}
    out = spec[op.out]
    rows = row_stride(spec[x.name])
    if rows is None or r.dynamic_rows and not isinstance(rows, int):
        raise ValueError(f"{x.name}: a fused linear's rows must be at a fixed stride, not {spec[x.name]}")
    if tuple(out.stride)[-2:] != (r.n, 1) or not r.dynamic_rows and len(out.stride) != 2:
        raise ValueError(f"{op.out}: a fused linear's output must be a whole [{r.m}, {r.n}] matrix, not {out}")
    t = config or tiles(r.m, r.n, r.k, r.dtype, glu=r.glu, bits=r.quant.bits if r.quant else 16)
    if r.quant and t.gemv and config is None:
        t = quant_gemv.row_tiles(r, t)
    if r.quant and t.gemv and quant_gemv.chunk_bytes(r, t) is None:  # no chunk fits a group: tl.dot's tiles
        t = tiles(GEMV_MAX_ROWS + 1, r.n, r.k, r.dtype, glu=r.glu)
    names = (["bias_ptr"] if r.bias else []) + (["norm_weight_ptr"] if r.norm_weight else []) + (
        ["norm_bias_ptr"] if r.norm_bias else []) + [f"e{i}_ptr" for i in range(len(r.extras))]
    kinds = dict(zip(names, ([r.bias] if r.bias else []) + ["row"] * (r.norm_weight + r.norm_bias) + list(r.extras)))
    quantized = ["scale_ptr"] + (["zero_ptr"] if r.quant.zero != "none" else []) if r.quant else []
    params = ["x_ptr", "w_ptr", *quantized, *names, "out_ptr"]
    values = [x.name, weight.name, *(o.name for o in operands), op.out]
    pointers = tuple((p, POINTER_TYPE[spec[v].dtype]) for p, v in zip(params, values))
    aligned = tuple(p for p, v in zip(params, values) if _aligned(spec[v]))
    if r.dynamic_rows:  # the rows, a size of the dynamic axes: the launch's last argument
        params, values = params + ["m_size"], values + [rows_of(op)]

    def load(param: str, value: str, offset: int = 0) -> str:
        s = spec[value]
        if kinds[param] == "row":
            start = f"{param} + {offset * s.stride[-1]}" if offset else param
            return f"tl.load({start} + rn * {s.stride[-1]}, mask=mask_n, other=0.0).to(tl.float32)[None, :]"
        return (f"tl.load({param} + rm.to(tl.int64)[:, None] * {s.stride[0]} + rn[None, :] * {s.stride[1]}, "
                "mask=mask, other=0.0).to(tl.float32)")

    by_param = dict(zip(params, values))
    lines = []
    products = ["acc", "acc_up"] if r.glu else ["acc"]
    quant = qgemv = None
    if r.quant and t.gemv:
        qspecs = {"x": spec[x.name], "w": spec[weight.name]}
        qspecs.update({p: spec[by_param[p]] for p in ("norm_weight_ptr", "norm_bias_ptr") if p in by_param})
        qgemv = quant_gemv.loop(r, qspecs, t, products)
    elif r.quant:
        quant = {p: _dequantize_lines(r, spec[weight.name], i) for i, p in enumerate(products)}
    if r.quant and r.quant.per_channel(r.k):
        lines += [f"{p} = {p} * tl.load(scale_ptr + {i * r.n} + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]"
                  for i, p in enumerate(products)]
    if r.bias:
        lines += [f"{p} = {p} + {load('bias_ptr', by_param['bias_ptr'], i * r.n)}" for i, p in enumerate(products)]
    if r.epilogue and r.dtype != "float32":
        lines += [f"{p} = {p}.to({TRITON_DTYPE[r.dtype]}).to(tl.float32)  # the product in its dtype" for p in products]
    lines += [f"e{i} = {load(f'e{i}_ptr', by_param[f'e{i}_ptr'])}" for i in range(len(r.extras))]
    for value, step, args in r.epilogue:
        lines.append(f"{value} = " + EPILOGUE_OPS[step][0].format(
            *(a if isinstance(a, str) else _number(a) for a in args)))
    w_stride = spec[weight.name].stride
    norm = None
    if r.norm:
        norm = {"kind": r.norm, "eps": _number(r.eps), "cast": TRITON_DTYPE.get(r.norm_cast) if r.norm_cast else None,
                "weight": "norm_weight_ptr" if r.norm_weight else None,
                "bias": "norm_bias_ptr" if r.norm_bias else None}
    summary = (f"[{r.m}, {r.k}] x [{r.k}, {r.n}]" + (" twice (gate and up)" if r.glu else "") + f" {r.dtype}"
               + (f" (weight {r.quant.describe(r.k)})" if r.quant else "")
               + (f", {r.norm} norm first" if r.norm else "")
               + (f", then {', '.join(s for _, s, _ in r.epilogue)}" if r.epilogue else "")
               + f"; tiles {t.block_m}x{t.block_n}x{t.block_k}" + (" gemv" if t.gemv else ""))
    context = dict(
        params=params, summary=summary, tiles_n=cdiv(r.n, t.block_n), m="m_size" if r.dynamic_rows else r.m,
        n=r.n, k=r.k, x_stride=(rows, spec[x.name].stride[-1]),
        w_stride=(w_stride[1], w_stride[0]) if r.weight_layout == "nk" else tuple(w_stride),
        norm=norm, operand_type=TRITON_DTYPE[r.dtype], epilogue=lines, result=r.result,
        out_type=TRITON_DTYPE[r.out_dtype],
        dot_options=f', input_precision="{recipes.FP32_DOT_PRECISION}"' if r.dtype == "float32" else "",
        glu=r.glu, quant=quant, qgemv=qgemv, gemv=t.gemv,
        glu_offset=r.n * (w_stride[0] if r.weight_layout == "nk" else w_stride[1]),
        sum_once=t.gemv and t.sum_once, rstd_after=qgemv["rstd_after"] if qgemv else rstd_after(r, t),
    )
    source = render("fused_linear.py.j2", name="KERNEL", **context)
    name = "fused_linear_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    kernel = g.Kernel(
        name=name, source=source.replace("def KERNEL(", f"def {name}(", 1), heuristic="matmul",
        signature=pointers + ((("m_size", "i32"),) if r.dynamic_rows else ())
        + (("BLOCK_M", "constexpr"), ("BLOCK_N", "constexpr"), ("BLOCK_K", "constexpr")),
        constants=(), divisible_by_16=aligned,
        numels=(("m", r.m), ("n", r.n), ("k", r.k)), reduction_hint=None, mutated=(),
        tiles=(("BLOCK_M", t.block_m), ("BLOCK_N", t.block_n), ("BLOCK_K", t.block_k)),
        family="fused_linear", grid=(cdiv(r.m, t.block_m) * cdiv(r.n, t.block_n), 1, 1), num_warps=t.num_warps,
        num_stages=t.num_stages,
    )
    return kernel, tuple(g.Ref(v) for v in values)


def rows_of(op: g.Extern) -> str:
    """The value holding the rows of a fused linear with dynamic rows (``Recipe.dynamic_rows``):
    the product of its x's leading sizes, computed by ``dynamic_output``."""
    return f"{op.out}_rows"


def dynamic_output(op: g.Extern, x: g.TensorSpec, out: g.TensorSpec) -> tuple[list[g.Scalar], g.TensorSpec]:
    """For a fused linear with dynamic rows: the ``Scalar``s that compute its rows
    (``rows_of``) and its output's sizes and strides from x's sizes at run time, and the output's
    spec in them (x's leading dims, then the columns; contiguous)."""
    leading, name = len(x.shape) - 1, op.out
    sizes = [g.Scalar(f"{name}_size{d}", "size", (op.args[0], d)) for d in range(leading)]
    scalars, product = list(sizes), sizes[0].out
    for d in range(1, leading):  # the rows, one multiplication at a time
        scalars.append(g.Scalar(rows_of(op) if d == leading - 1 else f"{name}_rows{d}", "mul",
                                (g.Ref(product), g.Ref(sizes[d].out))))
        product = scalars[-1].out
    if leading == 1:
        scalars.append(g.Scalar(rows_of(op), "size", (op.args[0], 0)))
    columns = out.shape[-1]
    strides = [columns]
    for d in range(leading - 1, 0, -1):  # a leading dim's stride: the next one's times its size
        scalars.append(g.Scalar(f"{name}_stride{d - 1}", "mul",
                                (strides[0], g.Ref(sizes[d].out))))
        strides.insert(0, g.Ref(scalars[-1].out))
    shape = tuple(g.Ref(s.out) for s in sizes) + (columns,)
    return scalars, g.replace(out, shape=shape, stride=(*strides, 1), storage_offset=0)


def rstd_after(r: Recipe, t: Tiles) -> bool:
    """Whether a 16-bit (or float32) GEMV's RMS norm leaves 1 / rms to multiply its sums
    (``recipe.RSTD_AFTER``): its squares summed in the loop from the x it loads, x times the norm's
    weight alone in the products, not rounded to bf16 as eager rounds x / rms (every product is
    linear in x). Tensor-core tiles round x to their operand type: they keep the norm first."""
    return t.gemv and r.quant is None and quant_gemv.rstd_after(r)


def _dequantize_lines(r: Recipe, q: g.TensorSpec, half: int) -> list[str]:
    """The lines that load one [BLOCK_K, BLOCK_N] tile of the quantized W (its ``half``-th N rows:
    glu) into ``w``, dequantized, in the operands' dtype for ``tl.dot`` (a GEMV's: ``quant_gemv``).
    A scale per output channel is left to the product (``kernel_for``)."""
    quant, groups, q_stride = r.quant, r.k // r.quant.group, q.stride
    rn, rk, mask = "rn[None, :]", "rk[:, None]", "mask_k[:, None] & mask_n[None, :]"
    start = f"{half * r.n * q_stride[0]} + " if half else ""
    bits = quant_gemv.by_bits()
    if quant.bits == 8:
        load = f"w = tl.load(w_ptr + {start}{rn} * {q_stride[0]} + {rk} * {q_stride[1]}, mask={mask}, other=0)"
        lines = ([load + ".to(tl.int32)", f"w = {quant_gemv.as_float('w', 128 if q.dtype == 'int8' else 0)}"] if bits
                 else [load + ".to(tl.float32)"])
    else:  # two weights a byte along k
        shift = f"(1 - {rk} % 2) * 4" if quant.high_first else f"({rk} % 2) * 4"
        nibble = f"(w >> ({shift})) & 15"
        lines = [f"w = tl.load(w_ptr + {start}{rn} * {q_stride[0]} + ({rk} // 2) * {q_stride[1]}, mask={mask}, "
                 "other=0).to(tl.int32)",
                 f"w = {quant_gemv.as_float(nibble, 0)}" if bits else f"w = ({nibble}).to(tl.float32)"]
    if quant.zero_value:
        lines.append(f"w = w - {_number(quant.zero_value)}")
    if not quant.per_channel(r.k):
        index = (f"{half * r.n * groups} + " if half else "") + f"{rn} * {groups} + {rk} // {quant.group}"

        def per_group(param: str) -> str:
            return f"tl.load({param} + {index}, mask={mask}, other=0.0).to(tl.float32)"

        if quant.zero == "point":
            lines.append(f"w = w - {per_group('zero_ptr')}")
        lines.append(f"w = w * {per_group('scale_ptr')}")
        if quant.zero == "offset":
            lines.append(f"w = w + {per_group('zero_ptr')}")
    lines.append(f"w = w.to({TRITON_DTYPE[r.dtype]})")
    return lines


def lower(graph: g.Graph) -> g.Graph:
    """``graph`` with every ``aotcombo::fused_linear`` call replaced by its output's allocation
    and a launch of its kernel."""
    if not any(isinstance(op, g.Extern) and op.op == f"{OP}.default" for op in graph.ops):
        return graph
    specs = graph.spec
    kernels = {k.name: k for k in graph.kernels}
    ops = []
    for op in graph.ops:
        if not (isinstance(op, g.Extern) and op.op == f"{OP}.default"):
            ops.append(op)
            continue
        kernel, args = kernel_for(op, specs)
        kernels.setdefault(kernel.name, kernel)
        spec = specs[op.out]
        if Recipe.from_json(op.args[3]).dynamic_rows:
            scalars, spec = dynamic_output(op, specs[op.args[0].name], spec)
            ops += scalars
        ops += [g.Alloc(op.out, spec), g.Launch(kernel.name, args)]
    return g.replace(graph, ops=tuple(ops), kernels=tuple(kernels.values()))
