"""Steps Inductor's wrapper writes as plain Python text, read into FX lines: device copies
and the last step of a mixed-order reduction. Any other text line fails the build."""

from __future__ import annotations

import re

import torch

from ...errors import UnsupportedModelError

_DEVICE_COPY = re.compile(r"^(\w+)\.copy_\((\w+)(?:, (?:True|False))?\)$")
# A workspace zeroed before the kernel that accumulates into it (a multi-block scan or sort:
# a cumsum over a 128k vocabulary), ``workspace_0.zero_()``.
_ZERO = re.compile(r"^(\w+)\.zero_\(\)$")
# A mixed-order reduction's last step, which Inductor writes as text: the kernel leaves one
# partial result per split of the rows in a float32 workspace, and the wrapper reduces them,
#   buf1 = workspace_0[0 * (n) * (r) : (0 + 1) * (n) * (r)].view(n, r).sum(dim=0).view([r]).to(torch.bfloat16)
# (``SIMDScheduling._codegen_mix_order_reduction``; the ``.view``/``.to`` tails are optional).
_MIX_ORDER_FINAL = re.compile(
    r"^(?P<out>\w+) = (?P<ws>\w+)\[(?P<start>[^\[\]]+?) : (?P<end>[^\[\]]+?)\]"
    r"\.view\((?P<nsplit>[^,]+), (?P<rnumel>[^,]+)\)\.(?P<op>sum|amax|amin|prod)\(dim=0\)"
    r"(?:\.view\(\[(?P<shape>[^\]]*)\]\))?(?:\.to\(torch\.(?P<dtype>\w+)\))?$"
)
# reduction -> (public aten overload, its dim argument); Inductor mixes orders for sum and prod.
_MIX_ORDER_OPS = {"sum": ("sum.dim_IntList", [0]), "prod": ("prod.dim_int", 0),
                  "amax": ("amax.default", [0]), "amin": ("amin.default", [0])}


def _size_expr(text: str, symbols: dict):
    """A size the wrapper wrote as Python text (``(0 + 1) * (64) * (s0 // 2)``) as a sympy
    expression over the graph's size symbols; only integers, names, + - * and //."""
    import ast

    import sympy
    from torch.utils._sympy.functions import FloorDiv

    def convert(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return sympy.Integer(node.value)
        if isinstance(node, ast.Name) and node.id in symbols:
            return symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -convert(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = convert(node.left), convert(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.FloorDiv):
                return FloorDiv(a, b)
        raise ValueError(f"cannot read the size {text!r}")

    return convert(ast.parse(text.strip(), mode="eval").body)


def structured_lines(lines):
    """The wrapper writes a few steps as plain text, which its FX converter rejects; give
    them line types it can read: device copies (a lifted constant moved to the GPU), a
    workspace zeroed before a kernel accumulates into it, and
    the final step of a mixed-order reduction (see ``_MIX_ORDER_FINAL``); comments are
    dropped. Any other text line fails the build, naming the line."""
    from torch._inductor.codegen.wrapper import WrapperLine

    class CopyLine(WrapperLine):
        def __init__(self, dst: str, src: str):
            self.dst, self.src = dst, src

        def codegen_fx(self, converter):
            def emit(line):
                nodes = converter.buffer_to_node
                converter.gm.graph.call_function(torch.ops.aten.copy_.default, args=(nodes[line.dst], nodes[line.src]))

            return emit

    class ZeroLine(WrapperLine):
        def __init__(self, buffer: str):
            self.buffer = buffer

        def codegen_fx(self, converter):
            def emit(line):
                converter.gm.graph.call_function(torch.ops.aten.zero_.default,
                                                 args=(converter.buffer_to_node[line.buffer],))

            return emit

    class MixOrderFinalLine(WrapperLine):
        """``out = reduce(workspace[start:end].view(nsplit, rnumel), dim=0)``, then the
        buffer's shape and dtype: an as_strided view, a public aten reduction, a view and a
        dtype conversion in the FX graph."""

        def __init__(self, text: str, match: re.Match):
            self.text, self.parts = text, match.groupdict()

        def codegen_fx(self, converter):
            def emit(line):
                aten = torch.ops.aten
                parts = line.parts
                symbols = {str(s): s for s in converter.expr_to_proxy if getattr(s, "is_Symbol", False)}
                try:
                    size = {k: _size_expr(parts[k], symbols) for k in ("start", "nsplit", "rnumel")}
                    shape = [_size_expr(d, symbols) for d in parts["shape"].split(",")] if parts["shape"] else None
                except (ValueError, SyntaxError) as exc:
                    raise UnsupportedModelError(
                        f"cannot package Inductor's mixed-order reduction step `{line.text}`: {exc}") from None
                sym = converter._generate_sym_node
                graph = converter.gm.graph
                out = parts["out"]
                partials = graph.call_function(
                    torch.as_strided,
                    args=(converter.buffer_to_node[parts["ws"]], [sym(size["nsplit"]), sym(size["rnumel"])],
                          [sym(size["rnumel"]), 1], sym(size["start"])),
                )
                partials.name = f"{out}_partials"
                overload, dim = _MIX_ORDER_OPS[parts["op"]]
                name, overload = overload.split(".")
                node = graph.call_function(getattr(getattr(aten, name), overload), args=(partials, dim))
                node.name = f"{out}_{parts['op']}"
                if shape is not None:  # the reduced buffer is contiguous, like the reduction's result
                    strides, running = [], 1
                    for d in reversed(shape):
                        strides.append(running)
                        running = running * d
                    node = graph.call_function(
                        torch.as_strided, args=(node, [sym(d) for d in shape], [sym(s) for s in reversed(strides)], 0))
                    node.name = f"{out}_view"
                if parts["dtype"]:
                    node = graph.call_function(aten.to.dtype, args=(node, getattr(torch, parts["dtype"])))
                node.name = out
                converter.buffer_to_node[out] = node

            return emit

    out = []
    for line in lines:
        if isinstance(line, str):
            text = line.strip()
            if match := _DEVICE_COPY.match(text):
                line = CopyLine(match.group(1), match.group(2))
            elif match := _ZERO.match(text):
                line = ZeroLine(match.group(1))
            elif match := _MIX_ORDER_FINAL.match(text):
                line = MixOrderFinalLine(text, match)
            elif not text or text.startswith("#"):
                continue
            else:
                raise UnsupportedModelError(
                    f"Inductor's wrapper code has a step aotcombo cannot package: `{text[:300]}`",
                    fix="report it with the model; meanwhile change the construct that makes it",
                )
        out.append(line)
    return out
