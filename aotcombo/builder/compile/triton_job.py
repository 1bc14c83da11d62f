"""Compile rendered combo kernels to cubin (and PTX) for target archs, with no GPU.

Triton compiles for any ``GPUTarget`` without a device: we load the rendered
module under a *virtual* file name (its source is registered with
``linecache``, which is where Triton's ``inspect`` calls read it), wrap the
combo kernel in an ``ASTSource`` with its pointer signature and the 16-byte
alignment Inductor proved, and keep the binary and the launch facts the
runtime needs, plus the registers and local memory ``cuobjdump`` reports.

Reproducible: no temporary path reaches a binary (virtual file names, no line
info: line tables would also carry the path of Triton's own sources), and
Triton's cache is pointed at the build's temporary folder, so what comes out
depends only on the inputs of ``cache.kernel_key``.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import linecache
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from ...errors import BuildError, CompileError, OutputError

NUM_STAGES = 1  # pointwise and reduction kernels have no loads worth pipelining (matmuls set theirs)
LINE_INFO = False  # line tables would put file paths into every binary


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
    registers: int | None = None  # per thread, from cuobjdump (None: not known)
    spills: int | None = None  # bytes of local memory per thread (register spills, local arrays)
    stack: int | None = None  # bytes of stack per thread
    pdl: bool = False  # it waits for the kernel before it (griddepcontrol): launch it early

    def to_entry(self) -> dict:
        entry = dataclasses.asdict(self)
        entry["global_scratch"] = list(self.global_scratch)
        entry["profile_scratch"] = list(self.profile_scratch)
        return entry

    @classmethod
    def from_entry(cls, entry: dict) -> "Binary":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in entry.items() if k in fields}
        values["global_scratch"] = tuple(values["global_scratch"])
        values["profile_scratch"] = tuple(values["profile_scratch"])
        return cls(**values)


@dataclass(frozen=True)
class Job:
    """One kernel to compile for one arch."""

    label: str  # "sm_80/combo_3": for messages and progress
    source: str
    name: str
    signature: tuple[tuple[str, str], ...]
    aligned: tuple[str, ...]
    arch: int
    num_warps: int
    num_stages: int = NUM_STAGES

    @property
    def options(self) -> dict:
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, "line_info": LINE_INFO}

    def key(self) -> str:
        from ..cache.store import kernel_key

        return kernel_key(self.source, self.name, dict(self.signature), list(self.aligned), self.arch, self.options)


# --- one kernel ------------------------------------------------------------------------


def _load_module(source: str, label: str):
    """Execute ``source`` as a module whose file is virtual: ``<aotcombo:label.py>``."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<aotcombo:{label}.py>"
    name = f"aotcombo_kernels_{digest}"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module  # Triton resolves globals through the module
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    except BaseException:
        _unload(name, filename)
        raise
    return module, name, filename


def _unload(name: str, filename: str) -> None:
    sys.modules.pop(name, None)
    linecache.cache.pop(filename, None)


def _keep_failed_source(job: Job) -> Path | None:
    """The source of a kernel that failed, somewhere that outlives the build."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="aotcombo-failed-"))
        path = folder / f"{job.label.replace('/', '_')}.py"
        path.write_text(job.source)
        return path
    except OSError:
        return None


def run_job(job: Job, triton_cache_dir: str | None = None) -> Binary:
    """Compile ``job`` here; raises ``CompileError`` (or ``OutputError`` for a full disk)."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:  # pragma: no cover - check_environment catches this first
        raise CompileError(f"cannot import triton: {exc}", fix="pip install 'triton==3.8.*'") from exc

    name = filename = None
    try:
        module, name, filename = _load_module(job.source, job.label)
        fn = getattr(module, job.name)
        params = [p for p, _ in job.signature]
        attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in job.aligned}
        src = ASTSource(fn=fn, signature=dict(job.signature), constexprs={}, attrs=attrs)
        with _triton_settings(triton, triton_cache_dir):
            compiled = triton.compile(
                src,
                target=GPUTarget("cuda", job.arch, 32),
                options={"num_warps": job.num_warps, "num_stages": job.num_stages},
            )
    except BuildError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OutputError(
                f"no space left on device while compiling {job.label} (temporary files go to {tempfile.gettempdir()})",
                fix="free disk space, or point TMPDIR at a disk that has some",
            ) from exc
        raise compile_error(job, exc) from exc
    except Exception as exc:  # noqa: BLE001 - any Triton failure is a compile error of this kernel
        raise compile_error(job, exc) from exc
    finally:
        if name is not None:
            _unload(name, filename)
    meta = compiled.metadata
    cubin = compiled.asm["cubin"]
    usage = resource_usage(cubin, meta.name)
    return Binary(
        name=meta.name,
        arch=job.arch,
        cubin=cubin,
        ptx=compiled.asm["ptx"],
        num_warps=meta.num_warps,
        shared=meta.shared,
        global_scratch=(meta.global_scratch_size, meta.global_scratch_align),
        profile_scratch=(meta.profile_scratch_size, meta.profile_scratch_align),
        registers=usage.get("registers"),
        spills=usage.get("local"),
        stack=usage.get("stack"),
        pdl="griddepcontrol.wait" in compiled.asm["ptx"],
    )


class _triton_settings:
    """No line info, and Triton's own cache in a folder of ours (restored after)."""

    def __init__(self, triton, cache_dir: str | None):
        self.knobs = triton.knobs
        self.cache_dir = cache_dir

    def __enter__(self):
        self.scopes = [self.knobs.compilation.scope()]
        if self.cache_dir is not None:
            self.scopes.append(self.knobs.cache.scope())
        for scope in self.scopes:
            scope.__enter__()
        self.knobs.compilation.disable_line_info = not LINE_INFO
        if self.cache_dir is not None:
            self.knobs.cache.dir = self.cache_dir
        return self

    def __exit__(self, *exc):
        for scope in reversed(self.scopes):
            scope.__exit__(*exc)
        return False


def compile_error(job: Job, exc: BaseException) -> CompileError:
    lines = str(exc).strip().splitlines()
    detail = "\n".join(lines[:12])
    kept = _keep_failed_source(job)
    where = f"the kernel source is saved at {kept}" if kept else "rerun with --verbose for the traceback"
    error = CompileError(
        f"Triton could not compile {job.name} for sm_{job.arch} ({job.label}): {type(exc).__name__}: {detail}",
        fix=f"{where}; report it with that file (it is generated from the model by aotcombo)",
    )
    error.detail = "".join(traceback.format_exception(exc))
    return error


# --- registers and local memory: cuobjdump ----------------------------------------------

_USAGE = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def _cuobjdump() -> str | None:
    try:
        import triton

        try:
            path = triton.knobs.nvidia.cuobjdump.path
        except Exception:  # noqa: BLE001 - knob missing or tool not runnable: look next to ptxas
            path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        return path if path and os.access(path, os.X_OK) else None
    except ImportError:
        return None


def resource_usage(cubin: bytes, function: str) -> dict:
    """``{"registers", "stack", "shared", "local"}`` of ``function`` in ``cubin`` per
    ``cuobjdump --dump-resource-usage`` (Triton ships it); ``{}`` when unavailable."""
    tool = _cuobjdump()
    if tool is None:
        return {}
    path = None
    try:
        fd, path = tempfile.mkstemp(suffix=".cubin")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    finally:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
    for match in _USAGE.finditer(out.stdout):
        if match.group(1) == function:
            registers, stack, shared, local = (int(match.group(i)) for i in range(2, 6))
            return {"registers": registers, "stack": stack, "shared": shared, "local": local}
    return {}
