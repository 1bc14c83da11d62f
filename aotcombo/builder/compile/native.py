"""The runtime's C extensions (``runtime/_launch.c``, ``runtime/_guard.c``), compiled at package time.

``extensions()`` returns the bytes of each (``_launch.abi3.so``: the kernel launcher;
``_guard.abi3.so``: the input check of graphs bound to the caller's tensors), by file name;
they go into the package's native wheel as ``<name>/_runtime/<file>`` (``wheel_tag`` names
that wheel's platform). The runtime imports them when it can, and launches through ctypes
and checks inputs with torch's TensorGuards when it cannot. They use only CPython's stable
ABI (3.10 and later) and link to nothing but libc, so a wheel built on one Python runs on
later ones; no compiler is needed where the wheel is installed.

Compiled once per process, with the C compiler ``$CC`` (default ``cc``) and this
Python's headers, in a temporary folder, with fixed flags and no build id: the same
compiler gives the same bytes on every build (a different compiler version gives other
bytes, and so another wheel). ``None`` comes back, with one warning line on stderr, when
there is no C compiler or no Python headers, or a compile fails; ``AOTCOMBO_NATIVE=0``
(``aotcombo build --no-native``) asks for ``None`` without a warning: only the pure
wheel is written then.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ...errors import EnvironmentError_

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
SOURCES = {"_launch.abi3.so": RUNTIME / "_launch.c", "_guard.abi3.so": RUNTIME / "_guard.c"}  # file: source
# -s and no build id: nothing in the file depends on where or when it was built. A call
# outside the limited API is undeclared under Py_LIMITED_API: an error, not a warning.
FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared", "-Wall", "-Werror=implicit-function-declaration", "-s",
         "-Wl,--build-id=none")


def disabled_by_env() -> bool:
    return os.environ.get("AOTCOMBO_NATIVE", "").strip().lower() in ("0", "false", "no", "off")


def extensions(required: bool = False) -> dict[str, bytes] | None:
    """The compiled extensions by file name, or None (see the module docstring); ``required``:
    an extension that cannot be compiled is a BuildError, not a warning."""
    if disabled_by_env() and not required:
        return None
    data, problem = _compile()
    if problem and required:
        raise EnvironmentError_(problem.split(":")[0], fix="install a C compiler and python3-dev, or drop --native")
    if problem:
        _warn_once(problem)
    return data


_MACHINES = {62: "x86_64", 183: "aarch64"}  # ELF e_machine
_GLIBC = re.compile(rb"GLIBC_2\.(\d+)")


def wheel_tag(files: dict[str, bytes]) -> str:
    """The wheel tag that tells the truth about the compiled extensions: CPython's stable
    ABI from 3.10, and the manylinux platform of their machine and the newest glibc symbol
    version they need (``cp310-abi3-manylinux_2_17_x86_64``)."""
    machines, glibc = set(), 17
    for name, so in files.items():
        if so[:4] != b"\x7fELF" or so[4] != 2:
            raise ValueError(f"{name} is not a 64-bit ELF file")
        machines.add(_MACHINES.get(int.from_bytes(so[18:20], "little" if so[5] == 1 else "big")))
        glibc = max([glibc, *(int(v) for v in _GLIBC.findall(so))])
    if None in machines or len(machines) != 1:
        raise ValueError("the C extensions were built for a machine aotcombo does not tag")
    return f"cp310-abi3-manylinux_2_{glibc}_{machines.pop()}"


def compile_to(folder: str | Path) -> dict[str, Path]:
    """Compile the extensions into ``folder``; returns their files by name (``_launch``,
    ``_guard``). Raises RuntimeError saying why not."""
    files, problem = _compile()
    if problem:
        raise RuntimeError(problem)
    paths = {}
    for filename, data in files.items():
        paths[filename.split(".")[0]] = path = Path(folder) / filename
        path.write_bytes(data)
    return paths


def compiler() -> list[str] | None:
    """The C compiler's command line ($CC, else cc), or None when it is not installed."""
    command = shlex.split(os.environ.get("CC") or "cc")
    if not command or shutil.which(command[0]) is None:
        return None
    return command


@functools.lru_cache(maxsize=None)
def _compile() -> tuple[dict[str, bytes] | None, str | None]:
    """({file: bytes}, None), or (None, why not) as a warning line."""
    fallback = ("the package will launch kernels through ctypes, a few microseconds slower per launch, and check "
                "inputs with torch's TensorGuards")
    cc = compiler()
    if cc is None:
        return None, f"no C compiler ({os.environ.get('CC') or 'cc'}) to build the C extensions: {fallback}"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return None, f"no Python headers in {include} (python3-dev) to build the C extensions: {fallback}"
    files = {}
    with tempfile.TemporaryDirectory(prefix="aotcombo-native-") as tmp:
        for filename, source in SOURCES.items():
            shutil.copyfile(source, Path(tmp) / source.name)  # compiled by its bare name: no path in the file
            command = [*cc, *FLAGS, f"-I{include}", source.name, "-o", filename]
            try:
                run = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.SubprocessError) as exc:
                return None, f"{cc[0]} could not build {source.name} ({exc}): {fallback}"
            if run.returncode:
                first = (run.stderr.strip().splitlines() or ["no message"])[0]
                return None, f"{cc[0]} failed to build {source.name} ({first}): {fallback}"
            files[filename] = (Path(tmp) / filename).read_bytes()
    return files, None


@functools.lru_cache(maxsize=None)
def _warn_once(text: str) -> None:
    prefix = "\r\x1b[2K" if sys.stderr.isatty() else ""  # over a progress line, if one is shown
    print(f"{prefix}aotcombo: warning: {text}", file=sys.stderr, flush=True)
