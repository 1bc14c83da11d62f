"""The runtime's C launcher (``runtime/_launch.c``), compiled at package time.

``extension()`` returns the bytes of ``_launch.abi3.so`` (``FILENAME``), which goes into
the package's native wheel as ``<name>/_runtime/_launch.abi3.so`` (``wheel_tag`` names
that wheel's platform); the runtime imports it when it can and launches through ctypes
when it cannot. It uses only
CPython's stable ABI (3.10 and later) and links to nothing but libc, so a wheel built
on one Python runs on later ones; no compiler is needed where the wheel is installed.

Compiled once per process, with the C compiler ``$CC`` (default ``cc``) and this
Python's headers, in a temporary folder, with fixed flags and no build id: the same
compiler gives the same bytes on every build (a different compiler version gives other
bytes, and so another wheel). ``None`` comes back, with one warning line on stderr, when
there is no C compiler or no Python headers, or the compile fails; ``AOTCOMBO_NATIVE=0``
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

from ..errors import EnvironmentError_

SOURCE = Path(__file__).resolve().parent.parent / "runtime" / "_launch.c"
FILENAME = "_launch.abi3.so"
# -s and no build id: nothing in the file depends on where or when it was built. A call
# outside the limited API is undeclared under Py_LIMITED_API: an error, not a warning.
FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared", "-Wall", "-Werror=implicit-function-declaration", "-s",
         "-Wl,--build-id=none")


def disabled_by_env() -> bool:
    return os.environ.get("AOTCOMBO_NATIVE", "").strip().lower() in ("0", "false", "no", "off")


def extension(required: bool = False) -> bytes | None:
    """The compiled launcher, or None (see the module docstring); ``required``: a launcher
    that cannot be compiled is a BuildError, not a warning."""
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


def wheel_tag(so: bytes) -> str:
    """The wheel tag that tells the truth about the compiled launcher: CPython's stable
    ABI from 3.10, and the manylinux platform of its machine and the newest glibc symbol
    version it needs (``cp310-abi3-manylinux_2_17_x86_64``)."""
    if so[:4] != b"\x7fELF" or so[4] != 2:
        raise ValueError("the C launcher is not a 64-bit ELF file")
    machine = _MACHINES.get(int.from_bytes(so[18:20], "little" if so[5] == 1 else "big"))
    if machine is None:
        raise ValueError("the C launcher was built for a machine aotcombo does not tag")
    glibc = max([17, *(int(v) for v in _GLIBC.findall(so))])
    return f"cp310-abi3-manylinux_2_{glibc}_{machine}"


def compile_to(folder: str | Path) -> Path:
    """Compile the launcher into ``folder``; returns the file. Raises RuntimeError saying why not."""
    data, problem = _compile()
    if problem:
        raise RuntimeError(problem)
    path = Path(folder) / FILENAME
    path.write_bytes(data)
    return path


def compiler() -> list[str] | None:
    """The C compiler's command line ($CC, else cc), or None when it is not installed."""
    command = shlex.split(os.environ.get("CC") or "cc")
    if not command or shutil.which(command[0]) is None:
        return None
    return command


@functools.lru_cache(maxsize=None)
def _compile() -> tuple[bytes | None, str | None]:
    """(bytes, None), or (None, why not) as a warning line."""
    fallback = "the package will launch kernels through ctypes, a few microseconds slower per launch"
    cc = compiler()
    if cc is None:
        return None, f"no C compiler ({os.environ.get('CC') or 'cc'}) to build the C launcher: {fallback}"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return None, f"no Python headers in {include} (python3-dev) to build the C launcher: {fallback}"
    with tempfile.TemporaryDirectory(prefix="aotcombo-native-") as tmp:
        shutil.copyfile(SOURCE, Path(tmp) / SOURCE.name)  # compiled by its bare name: no path in the file
        command = [*cc, *FLAGS, f"-I{include}", SOURCE.name, "-o", FILENAME]
        try:
            run = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            return None, f"{cc[0]} could not build the C launcher ({exc}): {fallback}"
        if run.returncode:
            first = (run.stderr.strip().splitlines() or ["no message"])[0]
            return None, f"{cc[0]} failed to build the C launcher ({first}): {fallback}"
        return (Path(tmp) / FILENAME).read_bytes(), None


@functools.lru_cache(maxsize=None)
def _warn_once(text: str) -> None:
    prefix = "\r\x1b[2K" if sys.stderr.isatty() else ""  # over a progress line, if one is shown
    print(f"{prefix}aotcombo: warning: {text}", file=sys.stderr, flush=True)
