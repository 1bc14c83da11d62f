"""The built wheel installs where only torch is, imports cheaply, and fails clearly without a GPU.

The target environment is a fresh venv holding torch (linked from this one,
with its own CUDA libraries) and nothing else: no triton, jinja2 or sympy.
"""

import os
import platform
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import torch

from aotcombo.builder.compile import native
from aotcombo.builder.inputs.environment import runtime_requirement
from aotcombo.builder.pipeline import build_package as build
from aotcombo.runtime.manifest import Manifest

ROOT = Path(__file__).resolve().parents[2]
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
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return build(Small(), (torch.randn(8, 32), torch.randn(16)), arch=["sm_90"], name="smallpkg", out=out)


@pytest.fixture(scope="module")
def wheel(built):
    return built.wheel


@pytest.fixture(scope="module")
def native_wheel(built):
    if native.compiler() is None:
        pytest.skip("no C compiler here: no native wheel")
    return built.wheels[1]


@pytest.fixture(scope="module")
def torch_only_venv(tmp_path_factory):
    """A venv whose site-packages links torch's runtime pieces from this environment."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    python = root / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
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
                     "smallpkg/_runtime/cuda.py", "smallpkg/_runtime/loader.py", "smallpkg/_runtime/manifest.py"):
        assert required in names
    assert any(n.startswith("smallpkg/kernels/sm_90/") and n.endswith(".cubin") for n in names)
    assert not any(n.startswith("smallpkg/kernels/ptx/") for n in names)  # sm_90's PTX runs on sm_90 alone
    assert not [n for n in names if n.endswith(".so")]  # pure: the runtime launches through ctypes
    wheel_file = zipfile.ZipFile(wheel).read("smallpkg-0.1.0.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: true" in wheel_file and "Tag: py3-none-any" in wheel_file
    metadata = zipfile.ZipFile(wheel).read("smallpkg-0.1.0.dist-info/METADATA").decode()
    assert f"Requires-Dist: {runtime_requirement()}" in metadata
    manifest = Manifest.from_json(zipfile.ZipFile(wheel).read("smallpkg/manifest.json"))
    assert manifest.archs == (90,) and manifest.inputs[0].shape == (8, 32)


def test_native_wheel_is_tagged_for_its_extensions(wheel, native_wheel):
    """The same package plus the C extensions, tagged with the platform the .so files were built for."""
    tag = native.wheel_tag(native.extensions())
    assert native_wheel.name == f"smallpkg-0.1.0-{tag}.whl" and tag.startswith("cp310-abi3-manylinux_2_")
    assert tag.endswith("_" + platform.machine())
    pure, native_zip = zipfile.ZipFile(wheel), zipfile.ZipFile(native_wheel)
    for filename, data in native.extensions().items():
        assert native_zip.read(f"smallpkg/_runtime/{filename}") == data
    extra = set(native_zip.namelist()) - set(pure.namelist())
    assert extra == {"smallpkg/_runtime/_launch.abi3.so", "smallpkg/_runtime/_guard.abi3.so"}
    wheel_file = native_zip.read("smallpkg-0.1.0.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_file and f"Tag: {tag}" in wheel_file


def test_pip_picks_the_wheel_that_fits(wheel, native_wheel, tmp_path):
    """From a folder holding both, pip takes the native wheel here and the pure one elsewhere."""
    links = str(wheel.parent)
    here = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--find-links", links,
                           "-d", str(tmp_path / "here"), "smallpkg"], capture_output=True, text=True)
    assert here.returncode == 0, here.stderr
    assert [p.name for p in (tmp_path / "here").iterdir()] == [native_wheel.name]
    other = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-index", "--find-links", links,
                            "-d", str(tmp_path / "arm"), "--only-binary=:all:", "--platform",
                            "manylinux2014_aarch64", "--python-version", "3.12", "smallpkg"],
                           capture_output=True, text=True)
    assert other.returncode == 0, other.stderr
    assert [p.name for p in (tmp_path / "arm").iterdir()] == [wheel.name]


@pytest.mark.parametrize("kind", ["pure", "native"])
def test_installs_and_imports_without_the_build_toolchain(built, torch_only_venv, tmp_path, kind):
    if kind == "native" and native.compiler() is None:
        pytest.skip("no C compiler here: no native wheel")
    wheel = built.wheels[0 if kind == "pure" else 1]
    python, site = torch_only_venv
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--upgrade",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    probe = (
        "import sys, time, torch\n"
        "for banned in ('triton', 'jinja2', 'sympy'):\n"
        "    try:\n"
        "        __import__(banned); print('HAS', banned)\n"
        "    except ImportError: pass\n"
        "t = time.perf_counter(); import smallpkg; dt = time.perf_counter() - t\n"
        "print('imported', [m for m in ('triton', 'jinja2', 'sympy', 'aotcombo') if m in sys.modules], "
        "f'{dt*1e3:.1f}ms')\n"
        "print(smallpkg.manifest.name, smallpkg.__doc__.splitlines()[0])\n"
        "from smallpkg._runtime import cuda\n"
        "print('launcher', cuda.launcher.__name__, cuda._launch and cuda._launch.__file__.rsplit('/', 1)[1])\n"
        "from smallpkg._runtime import torch_private\n"
        "print('guard', torch_private.native_guard((torch.zeros(2),), 4) is not None)\n"
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
    if kind == "native":
        assert "launcher native_launcher _launch.abi3.so" in out and "guard True" in out, out
    else:
        assert "launcher ctypes_launcher None" in out and "guard False" in out, out


@pytest.mark.parametrize("how", ["env", "option"])
def test_pure_wheel_without_the_c_launcher(tmp_path, monkeypatch, how):
    options = {}
    if how == "env":
        monkeypatch.setenv("AOTCOMBO_NATIVE", "0")
    else:
        options["native"] = False  # what build --no-native passes
    result = build(Small(), (torch.randn(8, 32), torch.randn(16)), arch=["sm_90"], name="smallpkg", out=tmp_path,
                   **options)
    assert result.wheels == [result.wheel] and result.wheel.name == "smallpkg-0.1.0-py3-none-any.whl"
    assert [p.name for p in tmp_path.iterdir()] == [result.wheel.name]


def test_project_wheel_ships_templates_and_runtime(tmp_path):
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True)
    (built,) = tmp_path.glob("aotcombo-*.whl")
    names = zipfile.ZipFile(built).namelist()
    for template in ("combo_kernel.py.j2", "program.py.j2", "package_init.py.j2"):
        assert f"aotcombo/templates/{template}" in names
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "aotcombo").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources - set(names) == set()  # every subpackage is listed in pyproject.toml
    assert "aotcombo/runtime/_launch.c" in names  # aotcombo.builder.compile.native compiles it when it writes a wheel


def test_names_from_forward_and_a_tampered_manifest(built, tmp_path):
    """The package speaks forward's names; a manifest edited after the build is refused
    at import, naming the file."""
    assert [i.name for i in built.manifest.inputs] == ["x", "y"]
    with zipfile.ZipFile(built.wheel) as z:
        z.extractall(tmp_path)
    init = (tmp_path / "smallpkg" / "__init__.py").read_text()
    assert "outputs = model(x, y)" in init and "Inputs: x float32[8, 32]; y float32[16]." in init
    probe = [sys.executable, "-c", "import smallpkg; print(smallpkg.manifest.inputs[0].name)"]
    assert subprocess.run(probe, capture_output=True, text=True, cwd=tmp_path, check=True).stdout == "x\n"
    path = tmp_path / "smallpkg" / "manifest.json"
    path.write_text(path.read_text().replace('"num_warps":', '"num_warps":1', 1))
    run = subprocess.run(probe, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode != 0
    assert (f"RuntimeError: {path}: its sha256 is not the one the build recorded (it changed after the build): "
            "the package is damaged or was not built by this aotcombo; reinstall or rebuild it") in run.stderr
