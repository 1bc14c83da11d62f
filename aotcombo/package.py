"""Package: lay out the generated package and build its wheel.

The package holds its program(s), the cubins per arch and PTX, the weights,
a manifest, and a copy of ``aotcombo/runtime`` as ``<name>/_runtime``. The
wheel is built with ``python -m build`` into a temporary folder and moved
into ``--out`` only when complete, so a failed build leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from . import __version__
from .codegen import render
from .errors import OutputError, UsageError

RUNTIME_DIR = Path(__file__).resolve().parent / "runtime"
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01: the earliest date a zip can hold


@dataclass(frozen=True)
class KernelEntry:
    name: str
    image: str  # path inside the package
    function: str
    grid: tuple[int, int, int]
    num_warps: int
    shared: int
    params: tuple[str, ...]
    global_scratch: tuple[int, int]
    profile_scratch: tuple[int, int]


def check_name(name: str) -> str:
    if not NAME.match(name) or name in sys.stdlib_module_names or name in ("torch", "triton", "aotcombo"):
        raise UsageError(
            f"{name!r} cannot be a package name",
            fix="pass --name with a Python identifier that is not a standard or well-known module",
        )
    return name


def stage(
    root: Path,
    name: str,
    manifest: dict,
    programs: dict[str, str],
    images: dict[str, bytes],
    sources: dict[str, str],
    weights: list[torch.Tensor],
) -> Path:
    """Write the package tree under ``root``; returns the project folder."""
    pkg = root / name
    pkg.mkdir(parents=True)
    shutil.copytree(RUNTIME_DIR, pkg / "_runtime", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for module, text in programs.items():
        (pkg / f"{module}.py").write_text(text)
    for path, data in images.items():
        target = pkg / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for path, text in sources.items():
        target = pkg / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    torch.save([w.contiguous() for w in weights], pkg / "weights.pt")
    (pkg / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    inputs = [i["name"] for i in manifest["inputs"]]
    (pkg / "__init__.py").write_text(
        render(
            "package_init.py.j2",
            name=name,
            version=__version__,
            inputs=inputs,
            input_specs=[f"{i['name']} {i['dtype']}{list(i['shape'])}" for i in manifest["inputs"]],
            archs=", ".join(f"sm_{a}" for a in manifest["archs"]),
            ptx_arch=manifest.get("ptx_arch"),
        )
    )
    (root / "pyproject.toml").write_text(
        render(
            "package_pyproject.toml.j2",
            name=name,
            dist_name=name.replace("_", "-"),
            version=manifest["version"],
            description=f"{name}: compiled ahead of time by aotcombo {__version__}",
            torch_floor="2.4",
            packages=[name, f"{name}._runtime"],
        )
    )
    (root / "MANIFEST.in").write_text(f"recursive-include {name} *.py *.json *.pt *.cubin *.ptx\n")
    return root


def build_wheel(project: Path, out_dir: Path) -> Path:
    """Build the wheel of ``project`` and move it into ``out_dir`` atomically."""
    with tempfile.TemporaryDirectory(prefix="aotcombo-wheel-") as tmp:
        env = dict(os.environ, SOURCE_DATE_EPOCH=SOURCE_DATE_EPOCH, PYTHONHASHSEED="0")
        result = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", tmp, str(project)],
            capture_output=True,
            text=True,
            env=env,
            cwd=project,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise OutputError(f"building the wheel failed:\n{tail}", fix="check that setuptools and build are installed")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            final = out_dir / wheels[0].name
            staged = out_dir / f".{wheels[0].name}.partial"
            shutil.copyfile(wheels[0], staged)
            os.replace(staged, final)
        except OSError as exc:
            staged.unlink(missing_ok=True) if "staged" in locals() else None
            raise OutputError(
                f"cannot write the wheel into {out_dir}: {exc.strerror or exc}",
                fix="pass --out with a writable folder that has free space",
            ) from exc
    return final
