"""Compile rendered combo kernels to cubin (and PTX) for target archs, with no GPU.

Triton compiles for any ``GPUTarget`` without a device: we import the
rendered module from a file (Triton reads kernel source through ``inspect``),
wrap the combo kernel in an ``ASTSource`` with its pointer signature and the
16-byte alignment Inductor proved, and keep the binary and the launch facts
the runtime needs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import CompileError

NUM_STAGES = 1  # pointwise and reduction kernels have no loads worth pipelining


@dataclass(frozen=True)
class Binary:
    """One kernel compiled for one arch."""

    name: str  # the kernel function's symbol
    arch: int
    cubin: bytes
    ptx: str
    num_warps: int
    shared: int
    global_scratch: tuple[int, int]
    profile_scratch: tuple[int, int]
    registers: int | None = None
    spills: int | None = None


def parse_arch(text: str) -> int:
    """``"sm_90"`` / ``"90"`` / ``"sm90"`` -> 90."""
    cleaned = text.strip().lower().removeprefix("sm_").removeprefix("sm")
    if not cleaned.isdigit() or len(cleaned) not in (2, 3):
        raise ValueError(f"unknown arch {text!r}: write it as sm_80, sm_90, ...")
    return int(cleaned)


def supported_archs() -> list[int]:
    """Archs Triton's NVIDIA backend here can target."""
    return [75, 80, 86, 87, 89, 90, 100, 103, 120]


def _load_module(source: str, path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    name = f"aotcombo_kernels_{hashlib.sha256(source.encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton resolves globals through the module
    spec.loader.exec_module(module)
    return module


def compile_kernel(
    source: str,
    name: str,
    signature: dict[str, str],
    aligned: list[str],
    arch: int,
    num_warps: int,
    workdir: Path,
) -> Binary:
    """Compile function ``name`` of module ``source`` for ``sm_{arch}``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    try:
        module = _load_module(source, workdir / f"{name}.py")
        fn = getattr(module, name)
        params = list(signature)
        attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in aligned}
        src = ASTSource(fn=fn, signature=dict(signature), constexprs={}, attrs=attrs)
        compiled = triton.compile(
            src,
            target=GPUTarget("cuda", arch, 32),
            options={"num_warps": num_warps, "num_stages": NUM_STAGES},
        )
    except Exception as exc:  # noqa: BLE001 - any Triton failure is a compile error of this kernel
        first = str(exc).strip().splitlines()
        detail = "\n".join(first[:12])
        raise CompileError(
            f"Triton could not compile {name} for sm_{arch}: {type(exc).__name__}: {detail}",
            fix=f"see the kernel source at {workdir / (name + '.py')}; report it with that file",
        ) from exc
    meta = compiled.metadata
    return Binary(
        name=meta.name,
        arch=arch,
        cubin=compiled.asm["cubin"],
        ptx=compiled.asm["ptx"],
        num_warps=meta.num_warps,
        shared=meta.shared,
        global_scratch=(meta.global_scratch_size, meta.global_scratch_align),
        profile_scratch=(meta.profile_scratch_size, meta.profile_scratch_align),
        registers=getattr(compiled, "n_regs", None),
        spills=getattr(compiled, "n_spills", None),
    )
