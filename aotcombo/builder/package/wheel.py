"""Write the package's wheels: the runtime, the package's files, its manifest, dist-info.

The package holds its program(s), the cubins per arch and PTX, the weights, a manifest,
and a copy of ``aotcombo/runtime`` as ``<name>/_runtime``. Two wheels of it:

* ``<name>-<version>-py3-none-any.whl``: pure Python; the runtime launches kernels
  through ctypes. It installs wherever torch does (Linux x86-64 or aarch64, any CPython).
* ``<name>-<version>-cp310-abi3-manylinux_2_17_x86_64.whl`` (the tag read off the
  binaries, see ``native.wheel_tag``): the same, plus the runtime's C extensions
  ``_runtime/_launch.abi3.so`` (the launcher) and ``_runtime/_guard.abi3.so`` (the input
  check of bound graphs), compiled here on CPython's stable ABI. pip prefers it
  wherever its tag fits (``pip install --find-links dist NAME``) and takes the pure
  one elsewhere.

The wheels are written here, directly (a wheel is a zip with a ``.dist-info`` folder,
PEP 427), not through a build backend: a wheel of known files needs none, and writing
it ourselves is what makes it reproducible and fast. Entries are sorted, every timestamp
is ``SOURCE_DATE_EPOCH`` (1980-01-01 unless set), permissions are 0644, and nothing
depends on the machine or on temporary paths: the same inputs (the C compiler among the
tools) give byte-identical wheels. ``Requires-Dist`` names the torch versions the
package is known to run on (``environment.RUNTIME_TORCH``).
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import os
import re
import tempfile
import time
import zipfile
from pathlib import Path

from ... import __version__
from ...errors import OutputError
from ...runtime.manifest import CAPTURE_AFTER, MAX_GRAPHS, Buckets, Dynamic
from ..compile import native
from ..inputs.environment import RUNTIME_PYTHON, runtime_requirement
from .manifest import Contents

RUNTIME_DIR = Path(__file__).resolve().parents[2] / "runtime"
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01: the earliest date a zip can hold
COMPRESSION = zipfile.ZIP_DEFLATED
COMPRESSLEVEL = 6
# Weights of a trained model hardly compress (random mantissas), and they are
# most of a wheel: a fast level keeps most of the gain at a fraction of the time.
WEIGHTS_COMPRESSLEVEL = 1


def _created_dirs(out: Path) -> list[Path]:
    """The folders ``out.mkdir(parents=True)`` is about to create, innermost last."""
    missing = []
    probe = out
    while not probe.exists() and probe.parent != probe:
        missing.append(probe)
        probe = probe.parent
    return list(reversed(missing))


# --- contents ---------------------------------------------------------------------------


def package_files(contents: Contents, extensions: dict[str, bytes] | None) -> dict[str, bytes]:
    """Every file of the package, by path inside the wheel: the runtime (with its C
    extensions, when given, by file name), the contents, the manifest, and ``__init__.py``."""
    from ..codegen.render import render

    manifest = contents.manifest
    name = manifest.name
    files: dict[str, bytes] = {}
    for path in sorted(RUNTIME_DIR.rglob("*.py")):
        if "__pycache__" not in path.parts:
            files[f"{name}/_runtime/{path.relative_to(RUNTIME_DIR).as_posix()}"] = path.read_bytes()
    for filename, data in (extensions or {}).items():
        files[f"{name}/_runtime/{filename}"] = data
    for path, data in contents.files.items():
        files[f"{name}/{path}"] = data
    files[f"{name}/manifest.json"] = manifest_json = manifest.to_json().encode()
    files[f"{name}/__init__.py"] = render(
        "package_init.py.j2",
        name=name,
        version=__version__,
        inputs=_call_arguments([i.name for i in manifest.inputs]),
        input_specs=[f"{i.name} {i.dtype}[{', '.join(map(str, i.shape))}]" for i in manifest.inputs],
        archs=", ".join(f"sm_{a}" for a in manifest.archs),
        ptx_arch=manifest.ptx_arch,
        batch=_shapes_sentence(manifest.shapes),
        external=bool(manifest.weights.external),
        state=list(manifest.weights.state),
        world_size=manifest.world_size,
        max_graphs=MAX_GRAPHS,
        capture_after=CAPTURE_AFTER,
        manifest_sha256=hashlib.sha256(manifest_json).hexdigest(),
    ).encode()
    return files


def _call_arguments(names: list[str]) -> list[str]:
    """How a call passes the inputs: by name, and ``*xs`` for those a ``*xs`` collects."""
    shown = []
    for name in names:
        packed = f"*{name.split('[')[0]}" if name.endswith("]") else name
        if packed not in shown:
            shown.append(packed)
    return shown


def _axes(dynamic) -> str:
    return "; ".join(f"{a.name} from {a.min} to {a.max}" for a in dynamic.axes)


def _shapes_sentence(shapes) -> str:
    """How the generated package's docstring states its batch sizes."""
    if isinstance(shapes, Dynamic):
        return (f"Dynamic axes (any size in range, one set of kernels): {_axes(shapes)}; in graph mode each distinct "
                f"size is captured at its call {CAPTURE_AFTER} (load(capture_after=N)).")
    if isinstance(shapes, Buckets):
        sizes = (f"Batch sizes (dim 0 of the batched inputs): {', '.join(map(str, shapes.sizes))}"
                 if shapes.axis == "batch" else f"Sizes of axis {shapes.axis}: {', '.join(map(str, shapes.sizes))}")
        return sizes + ("; sizes between them run padded to the next one." if shapes.pad else ".") + (
            f" In each, dynamic axes: {_axes(shapes.dynamic)}." if shapes.dynamic else "") + (
            " The inputs above are those of the largest; each size loads at its first call (model.warm_up() "
            "loads all).")
    return ""


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


PURE = "py3-none-any"  # the pure wheel's tag: the runtime launches through ctypes


def wheel_name(name: str, version: str, tag: str = PURE) -> str:
    return f"{re.sub(r'[-_.]+', '_', name)}-{version.replace('-', '_')}-{tag}.whl"


def dist_info(name: str, version: str, tag: str) -> dict[str, bytes]:
    dist = f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {name.replace('_', '-')}\n"
        f"Version: {version}\n"
        f"Summary: {name}: compiled ahead of time by aotcombo {__version__}\n"
        f"Requires-Python: {RUNTIME_PYTHON}\n"
        f"Requires-Dist: {runtime_requirement()}\n"
    )
    wheel = (f"Wheel-Version: 1.0\nGenerator: aotcombo ({__version__})\n"
             f"Root-Is-Purelib: {'true' if tag == PURE else 'false'}\nTag: {tag}\n")
    return {
        f"{dist}/METADATA": metadata.encode(),
        f"{dist}/WHEEL": wheel.encode(),
        f"{dist}/top_level.txt": f"{name}\n".encode(),
    }


def wheel_bytes_to(stream, name: str, version: str, files: dict[str, bytes], tag: str = PURE) -> None:
    """Write the wheel of ``files`` (paths inside the wheel -> contents) to ``stream``."""
    meta = dist_info(name, version, tag)
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


def write_wheels(out_dir: str | Path, contents: Contents, native_extensions: bool | None = None) -> list[Path]:
    """Write the package's wheels into ``out_dir``; returns their paths, the pure one first.

    The pure wheel (``py3-none-any``) installs anywhere torch does and launches kernels
    through ctypes. Unless ``native_extensions`` is False, a second wheel carries the C
    extensions too (the launcher and the input guard), tagged for what they run on
    (``cp310-abi3-manylinux_2_17_x86_64``: CPython >= 3.10 on this platform); pip prefers it
    where it fits. ``native_extensions=True`` makes an extension that cannot be compiled an
    error rather than a warning.

    Atomic: each wheel is written to a hidden temporary file and renamed into place only
    when all are complete; on any failure nothing is left, not even the folders this call
    created, and an ``OutputError`` says what went wrong."""
    name, version = contents.manifest.name, contents.manifest.version
    wheels = [(PURE, package_files(contents, None))]
    extensions = native.extensions(required=bool(native_extensions)) if native_extensions is not False else None
    if extensions is not None:
        wheels.append((native.wheel_tag(extensions), package_files(contents, extensions)))
    out_dir = Path(out_dir)
    created = _created_dirs(out_dir)
    partials: list[tuple[Path, Path]] = []
    done = False
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for tag, files in wheels:
            final = out_dir / wheel_name(name, version, tag)
            stream, partial = _open_partial(out_dir, final.name)
            partials.append((partial, final))
            with stream:
                wheel_bytes_to(stream, name, version, files, tag)
                stream.flush()
                os.fsync(stream.fileno())
            os.chmod(partial, 0o644)
        for partial, final in partials:
            os.replace(partial, final)
        done = True
    except OSError as exc:
        raise _output_error(exc, out_dir) from exc
    finally:
        if not done:
            for partial, _ in partials:
                try:
                    partial.unlink()
                except OSError:
                    pass
            for folder in reversed(created):
                try:
                    folder.rmdir()
                except OSError:
                    break
    return [final for _, final in partials]


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
