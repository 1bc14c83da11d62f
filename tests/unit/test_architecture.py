"""The promises docs/architecture.md makes about the code's shape, checked."""

import ast
import re
import sys
import tomllib
from pathlib import Path

from aotcombo.builder.inputs.environment import BUILD_REQUIREMENTS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aotcombo"
MAX_LINES = 400
# torch's private API: the builder's trace/ folder holds every use of it in the builder, and one
# runtime module every use in the runtime (docs/architecture.md names both).
PRIVATE_TORCH = re.compile(r"\btorch\._[A-Za-z]")
PRIVATE_HOMES = (PACKAGE / "builder" / "trace", PACKAGE / "runtime" / "torch_private.py")


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_torchs_private_api_is_used_under_the_trace_folder_and_one_runtime_module_only():
    offenders = [str(p.relative_to(ROOT)) for p in _modules()
                 if PRIVATE_TORCH.search(p.read_text()) and not any(p == h or h in p.parents for h in PRIVATE_HOMES)]
    assert offenders == []


def test_the_private_api_test_sees_every_form_of_it():
    for text in ("import torch._inductor", "from torch._dynamo import config", "torch._C._dynamo.guards",
                 "getattr(torch._C, 'x')", "from torch._subclasses.fake_tensor import FakeTensor"):
        assert PRIVATE_TORCH.search(text), text
    assert not PRIVATE_TORCH.search("torch.ops.aten._unsafe_view.default")


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_runtime_needs_only_the_standard_library_and_torch():
    for path in (PACKAGE / "runtime").glob("*.py"):
        outside = _imports(path) - set(sys.stdlib_module_names) - {"torch"}
        assert outside == set(), (path.name, outside)
    manifest = PACKAGE / "runtime" / "manifest.py"
    assert _imports(manifest) <= set(sys.stdlib_module_names), "the contract must load without torch"


def test_pyproject_lists_the_build_requirements_environment_checks():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {r.split("=")[0].split(">")[0].split("<")[0].strip(): r for r in project["dependencies"]}
    assert declared == BUILD_REQUIREMENTS


def test_what_the_build_imports_is_declared():
    """Every third-party module the package imports is a declared requirement (or an optional extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = set(BUILD_REQUIREMENTS) | {"matplotlib"}  # matplotlib: the png extra, imported lazily
    optional = {r.split(">")[0].split("=")[0] for extra in project["optional-dependencies"].values() for r in extra}
    imported = set().union(*(_imports(p) for p in _modules())) - set(sys.stdlib_module_names) - {"aotcombo"}
    assert imported <= declared | optional, imported - declared - optional


def test_nothing_imports_from_tests_and_no_test_from_benchmarks():
    """What tests, scripts and benchmarks share is aotcombo.testing: no module outside tests/
    imports a module of tests/ (nor puts tests/ on sys.path), and no test imports a benchmark."""
    in_tests = {p.stem for p in (ROOT / "tests").rglob("*.py")}
    in_benchmarks = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
    outside = _modules() + sorted((ROOT / "scripts").glob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    offenders = [str(p.relative_to(ROOT)) for p in outside
                 if _imports(p) & in_tests or '"tests"' in p.read_text() and "sys.path" in p.read_text()]
    offenders += [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if _imports(p) & in_benchmarks]
    assert offenders == []
