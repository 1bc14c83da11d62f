"""Package: lay out the generated package and write its wheel.

The package holds its program(s), the cubins per arch and PTX, the weights,
a manifest, and a copy of ``aotcombo/runtime`` as ``<name>/_runtime``.

The runtime's C launcher (``aotcombo/native.py``), compiled here, rides along
as ``<name>/_runtime/_launch.abi3.so`` when a C compiler is at hand. The wheel
stays tagged ``py3-none-any``, and that tag stays true: the runtime imports the
launcher where it loads (CPython >= 3.10 on the build machine's platform) and
launches through ctypes elsewhere, so the wheel still installs and runs on any
platform and Python that torch runs on, only faster where the launcher loads.

The wheel is written here, directly (it is a zip with a ``.dist-info``
folder, PEP 427), not through a build backend: a wheel of known files needs
none, and writing it ourselves is what makes it reproducible and fast.
Entries are sorted, every timestamp is ``SOURCE_DATE_EPOCH`` (1980-01-01
unless set), permissions are 0644, and nothing depends on the machine or on
temporary paths: the same inputs (the C compiler among the tools) give a
byte-identical wheel. It is written
to a hidden temporary file inside ``--out`` and renamed into place only when
complete, so a failed or interrupted build leaves nothing behind (not even
``--out`` itself, when the build had to create it).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import os
import re
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from . import __version__
from .errors import OutputError, UsageError

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01: the earliest date a zip can hold
TORCH_FLOOR = "2.4"
REQUIRES_PYTHON = ">=3.9"
COMPRESSION = zipfile.ZIP_DEFLATED
COMPRESSLEVEL = 6
# Weights of a trained model hardly compress (random mantissas), and they are
# most of a wheel: a fast level keeps most of the gain at a fraction of the time.
WEIGHTS_COMPRESSLEVEL = 1


def check_name(name: str) -> str:
    if not NAME.match(name) or name in sys.stdlib_module_names or name in ("torch", "triton", "aotcombo"):
        raise UsageError(
            f"{name!r} cannot be a package name",
            fix="pass --name with a Python identifier that is not a standard or well-known module",
        )
    return name


def check_version(version: str) -> str:
    """The normalized form of ``version`` (PEP 440), or a UsageError."""
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - packaging comes with build and setuptools
        if re.fullmatch(r"\d+(\.\d+)*", version):
            return version
        raise UsageError(f"version {version!r} is not of the form 1.2.3", fix="pass --version-tag 1.2.3") from None
    try:
        return str(Version(version))
    except InvalidVersion:
        raise UsageError(
            f"version {version!r} is not a valid Python package version (PEP 440)",
            fix="pass --version-tag like 1.0.0, 2.1.0rc1 or 0.3.dev4",
        ) from None


# --- --out ----------------------------------------------------------------------------


def check_out_dir(out: str | Path) -> Path:
    """Fail early (before any tracing) when ``out`` cannot become a folder we write to."""
    out = Path(out)
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe == out and out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder", fix="pass --out with a folder (it is created if needed)")
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


def _created_dirs(out: Path) -> list[Path]:
    """The folders ``out.mkdir(parents=True)`` is about to create, innermost last."""
    missing = []
    probe = out
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    return list(reversed(missing))


# --- contents ---------------------------------------------------------------------------


def package_files(
    name: str,
    manifest: dict,
    programs: dict[str, str],
    images: dict[str, bytes],
    sources: dict[str, str],
    weights: bytes,
    native: bool | None = None,
) -> dict[str, bytes]:
    """Every file of the package, by path inside the wheel. ``native=False`` leaves the C
    launcher out; None: in unless ``AOTCOMBO_NATIVE=0`` (see ``aotcombo.native``)."""
    from . import native as c_launcher
    from .codegen import render

    files: dict[str, bytes] = {}
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        files[f"{name}/_runtime/{path.relative_to(RUNTIME_DIR).as_posix()}"] = path.read_bytes()
    launcher = c_launcher.extension() if native is not False else None
    if launcher is not None:
        files[f"{name}/_runtime/{c_launcher.FILENAME}"] = launcher
    for module, text in programs.items():
        files[f"{name}/{module}.py"] = text.encode()
    for path, data in images.items():
        files[f"{name}/{path}"] = data
    for path, text in sources.items():
        files[f"{name}/{path}"] = text.encode()
    files[f"{name}/weights.pt"] = weights
    files[f"{name}/manifest.json"] = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
    inputs = [i["name"] for i in manifest["inputs"]]
    files[f"{name}/__init__.py"] = render(
        "package_init.py.j2",
        name=name,
        version=__version__,
        inputs=inputs,
        input_specs=[f"{i['name']} {i['dtype']}[{', '.join(map(str, i['shape']))}]" for i in manifest["inputs"]],
        archs=", ".join(f"sm_{a}" for a in manifest["archs"]),
        ptx_arch=manifest.get("ptx_arch"),
        batch=_batch_sentence(manifest.get("batch")),
    ).encode()
    return files


def _batch_sentence(batch: dict | None) -> str:
    """How the generated package's docstring states its batch sizes."""
    if not batch:
        return ""
    if "range" in batch:
        return (f"Dim 0 of the batched inputs is a dynamic batch from {batch['range'][0]} to {batch['range'][1]}; "
                "in graph mode each batch size is captured at its first call.")
    shapes = f"Batch sizes (dim 0 of the batched inputs): {', '.join(map(str, batch['sizes']))}"
    return shapes + ("; sizes between them run padded to the next one." if batch.get("pad") else ".") + (
        " The inputs above are those of the largest; each size loads at its first call (model.warm_up() loads all).")


def save_weights(weights) -> bytes:
    """``torch.save`` of the weights, in memory. Deterministic: saved to a buffer
    the archive's records are named ``archive/...`` (saved to a file they would
    carry its name), storages are numbered in order, every record's date is
    torch's fixed one, and its serialization id is derived from the data."""
    import torch

    buffer = io.BytesIO()
    torch.save([w.contiguous() for w in weights], buffer)
    return buffer.getvalue()


# --- the wheel -----------------------------------------------------------------------------


def _epoch() -> tuple[int, int, int, int, int, int]:
    value = os.environ.get("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    try:
        seconds = max(int(value), int(SOURCE_DATE_EPOCH))
    except ValueError:
        seconds = int(SOURCE_DATE_EPOCH)
    return time.gmtime(seconds)[:6]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_name(name: str, version: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', name)}-{version.replace('-', '_')}-py3-none-any.whl"


def dist_info(name: str, version: str, description: str) -> dict[str, bytes]:
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {name.replace('_', '-')}\n"
        f"Version: {version}\n"
        f"Summary: {description}\n"
        f"Requires-Python: {REQUIRES_PYTHON}\n"
        f"Requires-Dist: torch>={TORCH_FLOOR}\n"
    )
    wheel = f"Wheel-Version: 1.0\nGenerator: aotcombo ({__version__})\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    return {
        f"{dist}/METADATA": metadata.encode(),
        f"{dist}/WHEEL": wheel.encode(),
        f"{dist}/top_level.txt": f"{name}\n".encode(),
    }


def wheel_bytes_to(stream, name: str, version: str, files: dict[str, bytes]) -> None:
    """Write the wheel of ``files`` (paths inside the wheel -> contents) to ``stream``."""
    description = f"{name}: compiled ahead of time by aotcombo {__version__}"
    meta = dist_info(name, version, description)
    dist = next(iter(meta)).split("/")[0]
    date = _epoch()
    ordered = sorted(files.items()) + sorted(meta.items())
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in ordered)
    record += f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(stream, "w") as zf:
        for path, data in ordered + [(f"{dist}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(path, date_time=date)
            info.create_system = 3  # unix: the permission bits below mean what they say
            info.external_attr = (0o100644 & 0xFFFF) << 16
            info.compress_type = COMPRESSION
            level = WEIGHTS_COMPRESSLEVEL if path.endswith("/weights.pt") else COMPRESSLEVEL
            zf.writestr(info, data, compress_type=COMPRESSION, compresslevel=level)


def _open_partial(folder: Path, final_name: str):
    """A new hidden file in ``folder`` for the wheel being written (tests replace it)."""
    fd, path = tempfile.mkstemp(prefix=f".{final_name}.", suffix=".partial", dir=folder)
    return os.fdopen(fd, "wb"), Path(path)


def write_wheel(out_dir: str | Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """Write the wheel into ``out_dir`` atomically; returns its path.

    On any failure the partial file, and every folder this call created, are
    removed again, and an ``OutputError`` says what went wrong."""
    out_dir = Path(out_dir)
    final_name = wheel_name(name, version)
    final = out_dir / final_name
    created = _created_dirs(out_dir)
    partial = None
    ok = False
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        stream, partial = _open_partial(out_dir, final_name)
        with stream:
            wheel_bytes_to(stream, name, version, files)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(partial, 0o644)
        os.replace(partial, final)
        partial = None
        ok = True
    except OSError as exc:
        raise _output_error(exc, out_dir) from exc
    finally:
        if partial is not None:
            try:
                partial.unlink()
            except OSError:
                pass
        if not ok:
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    break
    return final


def _output_error(exc: OSError, out_dir: Path) -> OutputError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OutputError(
            f"no space left on the device of {out_dir} while writing the wheel; nothing was written",
            fix="free disk space, or pass --out with a folder on a disk that has some",
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(
            f"cannot write into {out_dir}: {exc.strerror}",
            fix="pass --out with a folder you can write to",
        )
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return OutputError(
            f"cannot create --out {out_dir}: a part of that path is a file, not a folder",
            fix="pass --out with a folder whose parents are folders",
        )
    return OutputError(
        f"cannot write the wheel into {out_dir}: {exc.strerror or exc}",
        fix="pass --out with a writable folder that has free space",
    )
