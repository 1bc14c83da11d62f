"""What every family of our own kernels shares: integer helpers and Triton's names for dtypes."""

from __future__ import annotations

import torch.fx

TRITON_DTYPE = {"float16": "tl.float16", "bfloat16": "tl.bfloat16", "float32": "tl.float32"}
POINTER_TYPE = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32", "bool": "*i1", "int8": "*i8",
                "uint8": "*u8", "int64": "*i64"}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def recompiled(ep, count: int, dead_code: bool = False) -> int:
    """``count``: the rewrites a pass made in the ExportedProgram ``ep``, its graph checked and
    recompiled where there were any (``dead_code``: the nodes nothing uses dropped first)."""
    if count:
        if dead_code:
            ep.graph.eliminate_dead_code()
        ep.graph.lint()
        ep.graph_module.recompile()
    return count


def meta_value(a):
    """An FX call's argument as its fake value: a node's ``meta["val"]``, lists and tuples
    element by element, anything else as it is."""
    if isinstance(a, torch.fx.Node):
        return a.meta.get("val")
    if isinstance(a, (list, tuple)):
        return type(a)(meta_value(v) for v in a)
    return a
