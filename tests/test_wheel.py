"""The built wheel installs where only torch is, imports cheaply, and fails clearly without a GPU.

The target environment is a fresh venv holding torch (linked from this one,
with its own CUDA libraries) and nothing else: no triton, jinja2 or sympy.
"""

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import torch

from aotcombo import native
from aotcombo.pipeline import build_package as build

ROOT = Path(__file__).resolve().parents[1]
# What `import torch` needs at run time besides torch itself.
TORCH_RUNTIME = ("torch", "torchgen", "functorch", "nvidia", "cuda", "typing_extensions", "filelock", "fsspec",
                 "networkx", "numpy", "packaging", "setuptools", "_distutils_hack")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(32))

    def forward(self, x, y):
        return {"sum": (x * self.scale).sum(-1), "act": torch.relu(y) + 1}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    result = build(Small(), (torch.randn(8, 32), torch.randn(16)), arch=["sm_90"], name="smallpkg", out=out)
    return result.wheel


@pytest.fixture(scope="module")
def torch_only_venv(tmp_path_factory):
    """A venv whose site-packages links torch's runtime pieces from this environment."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if top in TORCH_RUNTIME or top.startswith(("nvidia_", "cuda_", "torch-", "numpy")):
            (site / entry.name).symlink_to(entry)
    return python, site


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel.name == "smallpkg-0.1.0-py3-none-any.whl"
    for required in ("smallpkg/__init__.py", "smallpkg/manifest.json", "smallpkg/weights.pt",
                     "smallpkg/_runtime/cuda.py", "smallpkg/_runtime/package.py"):
        assert required in names
    assert any(n.startswith("smallpkg/kernels/sm_90/") and n.endswith(".cubin") for n in names)
    assert any(n.startswith("smallpkg/kernels/ptx/") and n.endswith(".ptx") for n in names)
    if native.compiler() is not None:  # the C launcher rides along; the runtime falls back to ctypes elsewhere
        assert "smallpkg/_runtime/_launch.abi3.so" in names
        assert zipfile.ZipFile(wheel).read("smallpkg/_runtime/_launch.abi3.so") == native.extension()
    manifest = json.loads(zipfile.ZipFile(wheel).read("smallpkg/manifest.json"))
    assert manifest["archs"] == [90] and manifest["inputs"][0]["shape"] == [8, 32]


def test_installs_and_imports_without_the_build_toolchain(wheel, torch_only_venv, tmp_path):
    python, site = torch_only_venv
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    probe = (
        "import sys, time, torch\n"
        "for banned in ('triton', 'jinja2', 'sympy'):\n"
        "    try:\n"
        "        __import__(banned); print('HAS', banned)\n"
        "    except ImportError: pass\n"
        "t = time.perf_counter(); import smallpkg; dt = time.perf_counter() - t\n"
        "print('imported', [m for m in ('triton', 'jinja2', 'sympy', 'aotcombo') if m in sys.modules], f'{dt*1e3:.1f}ms')\n"
        "print(smallpkg.manifest['name'], smallpkg.__doc__.splitlines()[0])\n"
        "from smallpkg._runtime import cuda\n"
        "print('launcher', cuda.launcher.__name__, cuda._launch and cuda._launch.__file__.rsplit('/', 1)[1])\n"
        "try:\n"
        "    smallpkg.load('cuda')\n"
        "except RuntimeError as e:\n"
        "    print('load error:', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "HAS" not in out, out
    assert "imported []" in out, out
    assert "smallpkg smallpkg: a PyTorch model compiled ahead of time" in out
    assert "load error:" in out and "torch.cuda is not available" in out
    if native.compiler() is not None:
        assert "launcher _native_launcher _launch.abi3.so" in out, out


@pytest.mark.parametrize("how", ["env", "option"])
def test_pure_wheel_without_the_c_launcher(tmp_path, monkeypatch, how):
    options = {}
    if how == "env":
        monkeypatch.setenv("AOTCOMBO_NATIVE", "0")
    else:
        options["native"] = False  # what build --no-native passes
    result = build(Small(), (torch.randn(8, 32), torch.randn(16)), arch=["sm_90"], name="smallpkg", out=tmp_path,
                   **options)
    names = zipfile.ZipFile(result.wheel).namelist()
    assert result.wheel.name == "smallpkg-0.1.0-py3-none-any.whl"
    assert "smallpkg/_runtime/cuda.py" in names and not [n for n in names if n.endswith(".so")]


def test_project_wheel_ships_templates_and_runtime(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    (built,) = tmp_path.glob("aotcombo-*.whl")
    names = zipfile.ZipFile(built).namelist()
    for template in ("combo_kernel.py.j2", "program.py.j2", "package_init.py.j2"):
        assert f"aotcombo/templates/{template}" in names
    assert "aotcombo/runtime/package.py" in names
    assert "aotcombo/runtime/_launch.c" in names  # aotcombo.native compiles it when it writes a wheel
