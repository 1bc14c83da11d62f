"""Synthetic builder graphs for the planner and codegen tests: Triton kernels of Inductor's
two shapes (``pointwise``, ``reduction``; the source a stub) and ``Builder``, a small DSL that
lays out inputs, allocations, launches and extern calls with automatic names."""

import itertools

from aotcombo.builder.plan import blocks
from aotcombo.builder import graph as g

F32 = "float32"


def pointwise(name, n=1024, inputs=1, outputs=1, y=None):
    params = [(f"in_ptr{i}", "*fp32") for i in range(inputs)] + [(f"out_ptr{i}", "*fp32") for i in range(outputs)]
    numels = [("y", y), ("x", n)] if y else [("x", n)]
    params += [(f"{k}numel", "i32") for k, _ in numels]
    params += [("YBLOCK", "constexpr")] if y else []
    params += [("XBLOCK", "constexpr")]
    return g.Kernel(
        name=name,
        source=f"@triton.jit\ndef {name}():\n    pass\n",
        heuristic="pointwise",
        signature=tuple(params),
        constants=(),
        divisible_by_16=(),
        numels=tuple(numels),
        reduction_hint=None,
        mutated=(),
    )


def reduction(name, x=64, r=512, persistent=True):
    params = [("in_ptr0", "*fp32"), ("out_ptr0", "*fp32"), ("xnumel", "i32"), ("r0_numel", "i32"),
              ("XBLOCK", "constexpr")]
    if not persistent:
        params.append(("R0_BLOCK", "constexpr"))
    return g.Kernel(
        name=name,
        source=f"@triton.jit\ndef {name}():\n    R0_BLOCK: tl.constexpr = {blocks.next_power_of_2(r)}\n"
        if persistent
        else f"@triton.jit\ndef {name}():\n    pass\n",
        heuristic="persistent_reduction" if persistent else "reduction",
        signature=tuple(params),
        constants=(),
        divisible_by_16=(),
        numels=(("x", x), ("r0_", r)),
        reduction_hint="INNER",
        mutated=(),
    )


def spec(n=1024):
    return g.TensorSpec((n,), (1,), F32)


class Builder:
    """Small DSL: inputs, allocations and launches with automatic names."""

    def __init__(self):
        self.inputs, self.ops, self.kernels = [], [], {}
        self.counter = itertools.count()

    def input(self):
        name = f"arg{len(self.inputs)}_1"
        self.inputs.append(g.Input(name, spec(), "user", len(self.inputs)))
        return name

    def launch(self, kernel, reads, writes=None, numels=None):
        self.kernels[kernel.name] = kernel
        outs = writes or []
        if writes is None:
            count = sum(p.startswith("out_ptr") for p, _ in kernel.signature)
            outs = [f"buf{next(self.counter)}" for _ in range(count)]
            for o in outs:
                self.ops.append(g.Alloc(o, spec()))
        args = [g.Ref(n) for n in list(reads) + list(outs)] + [v for _, v in kernel.numels]
        self.ops.append(g.Launch(kernel.name, tuple(args)))
        return outs[0] if len(outs) == 1 else outs

    def extern(self, a, b):
        out = f"buf{next(self.counter)}"
        self.ops.append(g.Alloc(out, spec()))
        self.ops.append(g.Extern("aten::mm.out", (g.Ref(a), g.Ref(b)), (("out", g.Ref(out)),), f"{out}_mm", (out,),
                                 (out,)))
        return out

    def graph(self, outputs):
        return g.Graph(90, tuple(self.inputs), tuple(self.ops), tuple(self.kernels.values()), tuple(outputs))
