"""The versions aotcombo builds with and the versions its packages run on: one place each.

``pyproject.toml`` repeats the build requirements for pip (a test checks they agree).
The runtime range is what the GPU check and the CPU checks have shown to work; it goes
into every wheel's ``Requires-Dist`` and manifest, and ``load()`` checks it.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

from ... import __version__
from ...errors import EnvironmentError_

BUILD_TORCH = "2.14"  # the torch whose Inductor traces: trace/ is written against it
BUILD_REQUIREMENTS = {
    "torch": f"torch=={BUILD_TORCH}.*",
    "triton": "triton==3.8.*",
    "jinja2": "jinja2>=3.1",
    "sympy": "sympy>=1.13",
    "numpy": "numpy",
    "packaging": "packaging",
}
# torch versions a built package runs on, [first, last]: checked on the GPU and on the CPU
RUNTIME_TORCH = ("2.11", "2.14")
RUNTIME_PYTHON = ">=3.10"


def runtime_requirement() -> str:
    """``torch>=2.11,<2.15``: the runtime range as a requirement specifier."""
    first, last = RUNTIME_TORCH
    major, minor = last.split(".")
    return f"torch>={first},<{major}.{int(minor) + 1}"


def check_environment() -> None:
    """Raise EnvironmentError_ unless this environment can build: the right torch, every
    build dependency importable, and not a compile worker importing the caller's script."""
    import multiprocessing

    import torch

    # The compile workers (forkserver or spawn) import the script that started the build, as
    # multiprocessing does for any child; a build at its top level would run again in each of
    # them, all writing to one --out. multiprocessing marks such an import (_inheriting).
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise EnvironmentError_(
            "a build was started while a compile worker imported the script that started it "
            f"({getattr(sys.modules.get('__mp_main__'), '__file__', 'the main script')})",
            fix="start the build under `if __name__ == \"__main__\":` in that script, as any program that "
            "starts processes must",
        )

    if not torch.__version__.startswith(BUILD_TORCH + "."):
        raise EnvironmentError_(
            f"aotcombo {__version__} builds with torch {BUILD_TORCH}.x; this environment has torch {torch.__version__}",
            fix=f"pip install '{BUILD_REQUIREMENTS['torch']}' in the build environment (built packages run on "
            f"torch {RUNTIME_TORCH[0]} to {RUNTIME_TORCH[1]})",
        )
    for module in ("triton", "jinja2", "sympy"):
        try:
            found = importlib.util.find_spec(module) is not None  # found, not imported: sympy alone takes 0.6 s
        except (ImportError, ValueError):  # ValueError: sys.modules[module] is None
            found = False
        if not found:
            raise missing(module)


def missing(module: str) -> EnvironmentError_:
    """The error for a build dependency that cannot be imported."""
    return EnvironmentError_(
        f"{module} is not installed in this environment ({sys.executable}); aotcombo needs it to build",
        fix=f"pip install '{BUILD_REQUIREMENTS.get(module, module)}' (or reinstall aotcombo with its dependencies)",
    )


@functools.cache
def tool_versions() -> dict[str, str | None]:
    """The versions of everything that shapes a build's output."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "aotcombo": __version__,
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda": torch.version.cuda,
        "triton": triton_version,
        "python": sys.version,
        "platform": sys.platform,
    }
