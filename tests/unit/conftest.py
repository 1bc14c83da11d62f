"""Fixtures that test files of ``unit/`` share, each module-scoped fixture made once per module
that asks for it.

The build-experience files (test_build_cache, test_build_wheel, test_build_workers,
test_inspect): a 2-layer MLP model file (``_build_helpers.MLP``) and its builds for sm_90.

The CLI error files (test_cli_input_errors, test_cli_build_errors, test_cli_interrupts): a build
cache for the module, set in the environment of each of its tests (``cache_env``, which each of
those files asks for in its ``pytestmark``), and the MLP's model file (``_cli_helpers.MLP``)."""

import pytest

from aotcombo.builder.inputs.modelfile import load_model_file
from aotcombo.builder.pipeline import build_package as build

import _build_helpers
import _cli_helpers


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("experience")


@pytest.fixture(scope="module")
def mlp_file(workdir):
    path = workdir / "src" / "mlp.py"
    path.parent.mkdir()
    path.write_text(_build_helpers.MLP)
    return path


@pytest.fixture(scope="module")
def cache_dir(workdir):
    return workdir / "cache"


@pytest.fixture(scope="module")
def builds(mlp_file, cache_dir, workdir):
    """The MLP built three times: cold cache, warm cache, no cache."""
    model, inputs = load_model_file(mlp_file)
    common = dict(arch=["sm_90"], name="mlp", jobs=1, model_file=mlp_file)
    cold = build(model, inputs, out=workdir / "cold", cache=cache_dir, **common)
    warm = build(model, inputs, out=workdir / "warm", cache=cache_dir, **common)
    uncached = build(model, inputs, out=workdir / "uncached", cache=False, **common)
    return cold, warm, uncached


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One build cache for the module: the good model is traced once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def cache_env(shared_cache, monkeypatch):
    monkeypatch.setenv("AOTCOMBO_CACHE_DIR", str(shared_cache))
    monkeypatch.delenv("AOTCOMBO_NO_CACHE", raising=False)


@pytest.fixture
def mlp(tmp_path):
    path = tmp_path / "mlp.py"
    path.write_text(_cli_helpers.MLP)
    return path
