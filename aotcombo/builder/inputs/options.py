"""A build's options, checked once, before any model is loaded.

``BuildOptions.checked(...)`` turns what a user passes (the CLI's flags or the Python
API's keywords) into one frozen value, or raises the ``UsageError``/``OutputError`` that
names the bad option and its fix. Every later stage takes the options as given.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...errors import OutputError, UsageError
from ...runtime.manifest import BATCH, Buckets, Dynamic, ShapeMode, Static

DEFAULT_ARCHS = ("sm_80", "sm_90")
SUPPORTED_ARCHS = (75, 80, 86, 87, 89, 90, 100, 103, 120)  # what Triton's NVIDIA backend targets
DISPATCHES = ("sequential", "round_robin", "auto")
WEIGHTS = ("packaged", "external")  # where a package's weights come from
MAX_BATCH = 1 << 16
MAX_RANKS = 64  # --tensor-parallel
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class BuildOptions:
    archs: tuple[int, ...]  # sorted, e.g. (80, 90)
    name: str  # the package's import name
    out: Path  # the folder the wheel goes to
    version: str = "0.1.0"  # PEP 440, normalized
    dispatch: str = "sequential"  # how a combo kernel maps programs to sub-kernels
    shapes: ShapeMode = Static()
    cache: object = True  # True: the default cache folder; False: none; a path: that folder
    jobs: int | None = None  # kernels compiled at once (None: the CPUs available)
    native: bool | None = None  # the C extensions: None (if a compiler is here), True, False
    weights: str = "packaged"  # "packaged" in the wheel, or "external": given to load(weights=...)
    pdl: bool = True  # programmatic dependent launch on sm_90 and later
    tensor_parallel: int = 1  # ranks the package runs on (torch.distributed; 1: one GPU)

    @classmethod
    def checked(cls, *, arch: Sequence[str | int] | str = DEFAULT_ARCHS, name: str = "model",
                out: str | Path = "dist", version: str = "0.1.0", dispatch: str = "sequential",
                shapes: ShapeMode | None = None, cache=True, jobs: int | None = None,
                native: bool | None = None, weights: str = "packaged", pdl: bool = True,
                tensor_parallel: int = 1) -> BuildOptions:
        if dispatch not in DISPATCHES:
            raise UsageError(f"unknown dispatch {dispatch!r}", fix=f"choose among {', '.join(DISPATCHES)}")
        if weights not in WEIGHTS:
            raise UsageError(f"unknown --weights {weights!r}", fix=f"choose among {', '.join(WEIGHTS)}")
        if jobs is not None and jobs < 1:
            raise UsageError(f"--jobs {jobs}: need at least 1", fix="pass --jobs 1 to compile in this process only")
        shapes = check_shapes(shapes or Static())
        return cls(archs=parse_archs(arch), name=check_name(name), out=check_out_dir(out),
                   version=check_version(version), dispatch=dispatch, shapes=shapes,
                   cache=cache, jobs=jobs, native=native, weights=weights, pdl=bool(pdl),
                   tensor_parallel=check_tensor_parallel(tensor_parallel))


def check_tensor_parallel(ranks) -> int:
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 1 <= ranks <= MAX_RANKS:
        raise UsageError(f"--tensor-parallel {ranks!r}: not a number of ranks",
                         fix=f"pass --tensor-parallel N with N from 2 to {MAX_RANKS} (the GPUs each forward runs on)")
    return ranks


# --- archs ----------------------------------------------------------------------------------


def parse_arch(text: str) -> int:
    """``"sm_90"`` / ``"90"`` / ``"sm90"`` -> 90."""
    cleaned = text.strip().lower().removeprefix("sm_").removeprefix("sm")
    if not cleaned.isdigit() or len(cleaned) not in (2, 3):
        raise ValueError(f"unknown arch {text!r}: write it as sm_80, sm_90, ...")
    return int(cleaned)


def parse_archs(archs: Sequence[str | int] | str | int) -> tuple[int, ...]:
    """``"sm_80,sm_90"`` or ``["sm_80", 90]`` -> (80, 90), each one Triton can target."""
    if isinstance(archs, str):
        archs = [a for a in archs.split(",") if a.strip()]
    elif isinstance(archs, int):
        archs = [archs]
    parsed = []
    for a in archs:
        try:
            value = a if isinstance(a, int) else parse_arch(str(a))
        except ValueError as exc:
            raise UsageError(str(exc), fix="pass --arch as a comma-separated list such as sm_80,sm_90") from None
        if value not in SUPPORTED_ARCHS:
            known = ", ".join(f"sm_{x}" for x in SUPPORTED_ARCHS)
            raise UsageError(f"unknown or unsupported arch sm_{value}", fix=f"choose among {known}")
        parsed.append(value)
    if not parsed:
        raise UsageError("no arch given", fix="pass --arch sm_80,sm_90")
    return tuple(sorted(set(parsed)))


# --- the package's name and version ----------------------------------------------------------


def check_name(name: str) -> str:
    if not _NAME.match(name) or name in sys.stdlib_module_names or name in ("torch", "triton", "aotcombo"):
        raise UsageError(
            f"{name!r} cannot be a package name",
            fix="pass --name with a Python identifier that is not a standard or well-known module",
        )
    return name


def check_version(version: str) -> str:
    """The normalized form of ``version`` (PEP 440), or a UsageError."""
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(version))
    except InvalidVersion:
        raise UsageError(
            f"version {version!r} is not a valid Python package version (PEP 440)",
            fix="pass --version-tag like 1.0.0, 2.1.0rc1 or 0.3.dev4",
        ) from None


# --- --out -----------------------------------------------------------------------------------


def check_out_dir(out: str | Path) -> Path:
    """Fail early (before any tracing) when ``out`` cannot become a folder we write to."""
    out = Path(out)
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe == out and out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder",
                          fix="pass --out with a folder (it is created if needed)")
    if probe.exists() and not probe.is_dir():
        raise OutputError(
            f"cannot create --out {out}: {probe} is a file, not a folder",
            fix="pass --out with a folder whose parents are folders",
        )
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise OutputError(
            f"cannot write into {probe} (permission denied)" if probe == out
            else f"cannot create --out {out}: {probe} is not writable (permission denied)",
            fix="pass --out with a folder you can write to",
        )
    return out


# --- shapes ----------------------------------------------------------------------------------


def parse_batch(text: str | Sequence[int], pad: bool = False) -> Buckets:
    """``--batch 1,2,4`` (or a list) -> ``Buckets((1, 2, 4), pad)``."""
    items = text.split(",") if isinstance(text, str) else list(text)
    sizes = []
    for item in items:
        try:
            size = int(str(item).strip())
        except ValueError:
            raise UsageError(f"--batch {text!r}: {str(item).strip()!r} is not a whole number",
                             fix="pass --batch as a comma-separated list of sizes, such as 1,2,4,8") from None
        sizes.append(size)
    return check_shapes(Buckets(tuple(sizes), pad))


def parse_buckets(text: str, pad: bool = False) -> Buckets:
    """``--buckets seq=128,256,512`` -> ``Buckets((128, 256, 512), pad, axis="seq")``;
    ``--buckets batch=1,2,4`` is ``--batch 1,2,4``."""
    axis, sep, sizes = text.partition("=")
    axis = axis.strip()
    if not sep or not _NAME.match(axis):
        raise UsageError(f"--buckets {text!r} is not of the form AXIS=SIZE,SIZE,...",
                         fix="pass --buckets seq=128,256,512 (an axis the model names) or --batch 1,2,4")
    buckets = parse_batch(sizes, pad)
    return buckets if axis == BATCH else dataclasses.replace(buckets, axis=axis)


def parse_dynamic(text: str) -> Dynamic:
    """``--dynamic batch=1:32,seq=1:512`` -> ``Dynamic(batch=(1, 32), seq=(1, 512))``; an axis
    without a range (``batch``) runs from 1 to 65536."""
    ranges = {}
    for item in (i for i in text.split(",") if i.strip()):
        match = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=\s*(\d+)\s*:\s*(\d+)\s*)?", item)
        if match is None:
            raise UsageError(f"--dynamic {text!r}: {item.strip()!r} is not of the form AXIS=MIN:MAX",
                             fix="pass --dynamic batch=1:32 or, naming the model's axes, batch=1:32,seq=1:512")
        name = match.group(1)
        if name in ranges:
            raise UsageError(f"--dynamic {text!r} names axis {name!r} twice", fix="give each axis one range")
        ranges[name] = (int(match.group(2)), int(match.group(3))) if match.group(2) else (1, MAX_BATCH)
    if not ranges:
        raise UsageError("--dynamic: no axis given", fix="pass --dynamic batch=1:32 (or batch=1:32,seq=1:512)")
    return check_shapes(Dynamic(**ranges))


def check_shapes(shapes: ShapeMode) -> ShapeMode:
    """The shape mode, normalized (bucket sizes sorted and distinct), or a UsageError."""
    if isinstance(shapes, Buckets):
        if not shapes.sizes:
            raise UsageError("--batch: no size given", fix="pass --batch 1,2,4,8")
        for size in shapes.sizes:
            if not 1 <= size <= MAX_BATCH:
                raise UsageError(f"--batch: {size} is out of range", fix=f"use sizes from 1 to {MAX_BATCH}")
        if shapes.dynamic is not None and not isinstance(shapes.dynamic, Dynamic):
            raise UsageError(f"Buckets(dynamic={shapes.dynamic!r}): not a Dynamic",
                             fix="pass Buckets(sizes, axis=..., dynamic=Dynamic(batch=(MIN, MAX)))")
        dynamic = shapes.dynamic and check_shapes(shapes.dynamic)
        if dynamic and shapes.axis in dynamic.ranges:
            raise UsageError(f"axis {shapes.axis} is both bucketed and dynamic",
                             fix=f"give {shapes.axis} sizes in --buckets or a range in --dynamic, not both")
        return dataclasses.replace(shapes, sizes=tuple(sorted(set(shapes.sizes))), pad=bool(shapes.pad),
                                   dynamic=dynamic)
    if isinstance(shapes, Dynamic):
        if not shapes.axes:
            raise UsageError("Dynamic(): no axis given", fix="pass Dynamic(batch=(1, 32)) or --dynamic batch=1:32")
        for axis in shapes.axes:
            if not _NAME.match(axis.name):
                raise UsageError(f"--dynamic: {axis.name!r} is not an axis name", fix="name axes as identifiers")
            if not 1 <= axis.min <= axis.max <= MAX_BATCH:
                raise UsageError(f"--dynamic {axis.name}={axis.min}:{axis.max}: the range is empty or out of bounds",
                                 fix=f"pass MIN:MAX with 1 <= MIN <= MAX <= {MAX_BATCH}")
            if axis.max < 2:
                raise UsageError(f"--dynamic {axis.name}={axis.min}:{axis.max} holds one size",
                                 fix="leave the axis out: a package serves its example inputs' size without it")
        return shapes
    if isinstance(shapes, Static):
        return shapes
    raise UsageError(f"unknown shape mode {shapes!r}",
                     fix="pass Static(), Buckets(sizes) or Dynamic(batch=(MIN, MAX), ...)")
