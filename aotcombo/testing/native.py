"""The runtime's C extensions compiled here, once per test session, and imported by name
(``compiled("_launch")``, ``compiled("_guard")``); tests that need one skip without a C compiler."""

from __future__ import annotations

import functools
import importlib.util
import tempfile

import pytest

from aotcombo.builder.compile import native


@functools.cache
def _paths() -> dict:
    return native.compile_to(tempfile.mkdtemp(prefix="aotcombo-test-native-"))


@functools.cache
def compiled(name: str):
    """The extension ``name`` (``_launch`` or ``_guard``), compiled from the runtime's source."""
    if native.compiler() is None:
        pytest.skip("no C compiler")
    spec = importlib.util.spec_from_file_location(name, _paths()[name])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
