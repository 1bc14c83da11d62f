"""What aotcombo reads in the text of Inductor's Triton kernels: block sizes Inductor fixed in
the source, whether a row is masked by its run-time length, and the rewrite of a kernel into a
jit helper that takes its program ids as arguments (a combo kernel's sub-kernel)."""

from __future__ import annotations

import re

from ...errors import UnsupportedModelError

_FIXED_BLOCK = re.compile(r"^\s*(R0_BLOCK|R1_BLOCK|XBLOCK): tl\.constexpr = (\d+)\s*$", re.M)
_PROGRAM_ID = re.compile(r"tl\.program_id\((\d)\)")
_NUM_PROGRAMS = re.compile(r"tl\.num_programs\((\d)\)")
_DEF_NAME = re.compile(r"^def (\w+)\(", re.M)
AXES = ("pid_x", "pid_y", "pid_z")


def fixed_blocks(source: str) -> dict[str, int]:
    """Block sizes Inductor wrote into the kernel as constants (a persistent reduction's)."""
    return {name: int(v) for name, v in _FIXED_BLOCK.findall(source)}


def masks_row_by_length(source: str, r: str) -> bool:
    """Whether the kernel masks reduction axis ``r`` (``"r0_"``) by its run-time numel."""
    return re.search(rf"\b{r}mask = {r}index < {r}numel\b", source) is not None


def as_helper(name: str, source: str, axis_counts: list[str]) -> str:
    """Kernel ``name`` as a jit helper that takes its program ids as arguments (``pid_x``,
    ``pid_y``, ``pid_z``), its ``tl.num_programs(i)`` replaced by ``axis_counts[i]``.

    Jit functions the kernel source defines besides the kernel (scan and sort combine
    functions) are renamed after the kernel, so two sub-kernels of one combo cannot clash."""
    for other in _DEF_NAME.findall(source):
        if other != name:
            source = re.sub(rf"\b{other}\b", f"{name}_{other.lstrip('_')}", source)
    match = re.search(rf"^def {name}\((.*?)\):\s*$", source, re.M | re.S)
    if match is None:
        raise UnsupportedModelError(f"cannot find the definition of kernel {name} in its source")
    params = match.group(1).strip().rstrip(",")
    source = source[: match.start()] + f"def {name}({params}, pid_x, pid_y, pid_z):" + source[match.end():]
    source = _PROGRAM_ID.sub(lambda m: AXES[int(m.group(1))], source)
    source = _NUM_PROGRAMS.sub(lambda m: axis_counts[int(m.group(1))], source)
    return source.rstrip()
