"""What ties a trace to the torch it ran on: the version the build supports, what the kernel
sources import, and the config modules whose settings change a trace (the cache keys on them)."""

from __future__ import annotations

import functools

SUPPORTED_TORCH = "2.14"

# What Inductor's kernel sources import: the combo-kernel modules start with
# these lines, and compile workers preload the module.
KERNEL_RUNTIME_MODULE = "torch._inductor.runtime.triton_helpers"
KERNEL_PRELUDE = (
    "from torch._inductor.runtime import triton_helpers",
    "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math",
)
# Config modules whose settings change what a trace produces (the trace cache keys on them).
TRACE_CONFIG_MODULES = (
    "torch._inductor.config",
    "torch._dynamo.config",
    "torch._functorch.config",
    "torch.fx.experimental._config",
    "torch._export.config",
)


def trace_config_changes() -> dict[str, dict | None]:
    """The settings of each imported trace config module whose value is not the default
    (None: the module cannot be read). A module not imported yet holds its defaults, and
    importing Inductor's just to read it costs a second.

    Compared by value, not by torch's notion of "set": after a ``config.patch`` is undone
    (as every trace does) settings hold their defaults again but count as set, which would
    make a process that has traced key differently from a fresh one."""
    import sys

    out: dict[str, dict | None] = {}
    for name in TRACE_CONFIG_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        try:
            current = module._get_dict()
            defaults = {key: entry.default for key, entry in module._config.items()}
        except Exception:  # noqa: BLE001 - an unknown config module: take every value
            try:
                out[name] = module.get_config_copy()
            except Exception:  # noqa: BLE001
                out[name] = None
            continue
        changed = {}
        for key, value in current.items():
            try:
                same = key in defaults and bool(value == defaults[key])
            except Exception:  # noqa: BLE001
                same = False
            if not same:
                changed[key] = value
        if changed:
            out[name] = changed
    return out


# Properties of a representative part for each arch. Inductor reads the SM


@functools.cache
def op_types() -> tuple[type, ...]:
    """The types of torch's operator objects (``torch.ops.aten.add`` and its overloads)."""
    import torch

    return (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
