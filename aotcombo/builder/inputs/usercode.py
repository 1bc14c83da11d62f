"""Whose code is a file: the user's, an installed package's, or code pinned by a version.

One answer for the whole build: error messages point at the innermost frame of user
code, the model file's loader drops the user's sibling modules, and the trace cache
follows user code through its globals while it identifies the rest by version.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from pathlib import Path

VERSIONED, THIRD_PARTY, USER = "versioned", "third_party", "user"


@functools.cache
def _versioned_packages() -> tuple[str, ...]:
    """Folders of the installed packages whose code a version names (the build's tool
    versions): torch (and the packages it bundles), triton and aotcombo."""
    roots = {str(Path(__file__).resolve().parents[2])}  # aotcombo/
    for name in ("torch", "triton", "torchgen", "functorch"):
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            roots.add(os.path.dirname(file))
    return _folders(roots)


@functools.cache
def _stdlib_roots() -> tuple[str, ...]:
    """Python's standard library. In a virtual environment ``platstdlib`` is the
    environment's own lib/pythonX.Y, which holds its site-packages too: the packages
    there are told apart first (``code_kind``)."""
    import sysconfig

    return _folders({sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")} - {None})


def _folders(paths) -> tuple[str, ...]:
    return tuple(sorted(os.path.realpath(p) + os.sep for p in paths))


@functools.cache
def code_kind(file: str | None) -> str:
    """``VERSIONED`` (the standard library, torch, triton, aotcombo, and code with no
    Python source), ``THIRD_PARTY`` (other installed packages: their sources are part of a
    trace's key) or ``USER``."""
    if not file:
        return VERSIONED  # builtins and extension types have no Python source
    if file.startswith("<"):
        return USER  # exec'd code
    path = os.path.realpath(file)
    if path.startswith(_versioned_packages()):
        return VERSIONED
    parts = path.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return THIRD_PARTY
    if path.startswith(_stdlib_roots()):
        return VERSIONED
    return USER


def is_user_file(file: str | os.PathLike | None) -> bool:
    return code_kind(os.fspath(file) if file is not None else None) == USER and not os.fspath(file).startswith("<")


def _innermost_frame(exc: BaseException, wanted) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc``, its causes and contexts whose file ``wanted(path)``."""
    found, seen = None, exc
    while seen is not None:
        for frame in traceback.extract_tb(seen.__traceback__):
            if frame.filename and wanted(frame.filename):
                found = frame
        seen = seen.__cause__ or seen.__context__
    return found


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of user code in ``exc``, its causes and contexts."""
    return _innermost_frame(exc, is_user_file)


def where(exc: BaseException) -> str:
    """`` at model.py:12 (`code`)`` for the innermost frame of user code in ``exc``, or ""."""
    frame = user_frame(exc)
    if frame is None:
        return ""
    return f" at {os.path.basename(frame.filename)}:{frame.lineno} (`{(frame.line or '').strip()}`)"


def library_where(exc: BaseException) -> str:
    """`` at transformers/models/mixtral/modeling_mixtral.py:81 (`code`)`` for the innermost
    frame of an installed package other than torch, triton and aotcombo in ``exc``, its causes
    and contexts, or "": where a model that is all library code (a transformers model passed
    as it is) failed, when ``where`` finds no user code."""
    found = _innermost_frame(exc, lambda file: code_kind(file) == THIRD_PARTY)
    if found is None:
        return ""
    parts = os.path.realpath(found.filename).split(os.sep)
    top = max(i for i, p in enumerate(parts) if p in ("site-packages", "dist-packages"))
    return f" at {'/'.join(parts[top + 1:])}:{found.lineno} (`{(found.line or '').strip()}`)"
