"""What ``load()`` checks before it loads anything: the variant for the GPU's arch, the torch
release the package runs on, and the options it was given."""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from .manifest import CAPTURE_AFTER, MAX_GRAPHS, Manifest

# From compute capability 90 on, Triton compiles for the arch-specific target (sm_90a, sm_100a...):
# its cubin and its PTX run on that arch alone.
ARCH_SPECIFIC_FROM = 90


def choose_variant(manifest: Manifest, arch: int, device_name: str | None = None) -> str:
    """The key of the variant that runs on a GPU of compute capability ``arch`` (e.g. 86).

    An exact cubin; else a cubin of the same major and a lower minor (not from 90 on:
    Triton builds those for sm_90a, sm_100a..., which run only on their own arch); else
    the PTX, when the driver can JIT it for this arch.
    """
    variants, archs, ptx = manifest.specializations[-1].variants, manifest.archs, manifest.ptx_arch
    if f"sm_{arch}" in variants:
        return f"sm_{arch}"
    same_major = [a for a in archs if a < ARCH_SPECIFIC_FROM and a // 10 == arch // 10 and a < arch
                  and f"sm_{a}" in variants]
    if same_major:
        return f"sm_{max(same_major)}"
    if "ptx" in variants and (ptx == arch or ptx < ARCH_SPECIFIC_FROM and ptx < arch):
        return "ptx"
    device = f"this device ({device_name})" if device_name else "this device"
    cubins = f"cubins for {', '.join(f'sm_{a}' for a in archs)}" if archs else "no cubins"
    ptx_text = f"PTX for sm_{ptx}+" if "ptx" in variants else "no PTX"
    raise RuntimeError(f"package {manifest.name} has {cubins} and {ptx_text}; {device} is sm_{arch}: "
                       f"rebuild with --arch sm_{arch}")


def check_torch(manifest: Manifest, version: str | None = None) -> None:
    """Raise RuntimeError unless this torch is one the package runs on (``AOTCOMBO_ANY_TORCH=1``
    skips the check, at the user's risk)."""
    version = version or torch.__version__
    first, last = manifest.torch
    release = _release(version)
    if _release(first) <= release <= _release(last) or os.environ.get("AOTCOMBO_ANY_TORCH") == "1":
        return
    private = manifest.private_ops
    calls = f"; it calls torch's private {', '.join(private)}, whose contract" if private else "; torch's ops"
    major, minor = last.split(".")
    raise RuntimeError(
        f"package {manifest.name} runs on torch {first} to {last}, and this is torch {version}{calls} may differ "
        f"in other releases: install torch>={first},<{major}.{int(minor) + 1}, or rebuild the package with an "
        "aotcombo that supports this torch (AOTCOMBO_ANY_TORCH=1 skips this check, at your own risk)")


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string: "2.14.1+cu130" -> (2, 14)."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


class Options(NamedTuple):
    """load()'s options for the models it makes."""

    graphs: bool | None
    copy_outputs: bool
    check_inputs: bool
    max_graphs: int
    capture_after: int


def check_options(graphs, copy_outputs, check_inputs, max_graphs: int = MAX_GRAPHS,
                  capture_after: int = CAPTURE_AFTER) -> Options:
    """Validate load()'s options."""
    if graphs is not None and not isinstance(graphs, bool):
        raise TypeError(f"load(): graphs must be True, False or None, got {graphs!r}")
    for name, value in (("copy_outputs", copy_outputs), ("check_inputs", check_inputs)):
        if not isinstance(value, bool):
            raise TypeError(f"load(): {name} must be True or False, got {value!r}")
    check_graph_budget(max_graphs, capture_after)
    return Options(graphs, copy_outputs, check_inputs, max_graphs, capture_after)


def check_graph_budget(max_graphs: int, capture_after: int) -> None:
    """``max_graphs`` from 1, ``capture_after`` from 2 (a size's first call runs op by op)."""
    for name, value, low in (("max_graphs", max_graphs, 1), ("capture_after", capture_after, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"load(): {name} must be a whole number from {low}, got {value!r} "
                             "(graphs=False runs every size op by op)")
