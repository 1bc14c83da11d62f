"""Build failures from what the user gives: the model file (missing, raising, lacking its
functions, inputs that do not fit it or bind to the wrong parameters), the CLI's arguments, the
environment, and inputs of the Python API that are not tensors. Each is a one-paragraph message
with a fix, its own exit status, no traceback, and nothing written to --out (``_cli_helpers``).

The CLI runs in-process (``aotcombo.tools.cli.main([...])``; one missing dependency is also
checked in a fresh process). How the harder cases are triggered:

* wrong torch version: ``torch.__version__`` monkeypatched to 2.13.0;
* missing build dependency: ``sys.modules["jinja2"] = None`` (``find_spec`` then fails).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from _cli_helpers import MLP, ROOT, assert_nothing_written, assert_one_error, run, write

pytestmark = pytest.mark.usefixtures("cache_env")


# --- model file -------------------------------------------------------------------------


def test_missing_model_file(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = run(capsys, tmp_path / "nope.py", "--out", out)
    assert code == 3
    assert_one_error(err, "model file", "does not exist")
    assert_nothing_written(out)


def test_model_file_raises(capsys, tmp_path):
    path = write(tmp_path, "import torch\nraise RuntimeError('no weights here')\n")
    code, _, err = run(capsys, path, "--out", tmp_path / "out")
    assert code == 3
    assert_one_error(err, "fails when it is run", "RuntimeError: no weights here", "line 2")
    assert_nothing_written(tmp_path / "out")


def test_model_file_lacks_functions(capsys, tmp_path):
    path = write(tmp_path, "import torch\n\ndef get_model():\n    return torch.nn.ReLU()\n")
    code, _, err = run(capsys, path, "--out", tmp_path / "out")
    assert code == 3
    assert_one_error(err, "has no function get_example_inputs()")
    assert_nothing_written(tmp_path / "out")


def test_inputs_do_not_fit_the_model(capsys, tmp_path):
    path = write(tmp_path, MLP.replace("torch.randn(8, 32,", "torch.randn(8, 31,"))
    code, _, err = run(capsys, path, "--out", tmp_path / "out")
    assert code == 3
    assert_one_error(err, "fails on its own example inputs")
    assert_nothing_written(tmp_path / "out")


CACHED = """\
import torch


class Cached(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, cache=None, mask=None):
        start = cache.get_seq_length() if cache is not None else 0
        return self.proj(x) * mask[..., None] + start


def get_model():
    return Cached()


def get_example_inputs():
    return (torch.randn(2, 4, 8), torch.ones(2, 4))
"""


def test_an_input_passed_by_position_to_a_parameter_that_takes_no_tensor(capsys, tmp_path):
    """A mask given second, where forward's second parameter is a cache: the error says how the
    inputs bind to forward's parameters and how to pass them by name."""
    code, _, err = run(capsys, write(tmp_path, CACHED), "--out", tmp_path / "out")
    assert code == 3
    assert_one_error(err, "fails on its own example inputs", "get_seq_length", "line 10",
                     "the 2 example inputs go to forward(x, cache, mask) by position, so to x, cache",
                     "a dict keyed by forward's parameter names", "passes them on by name")
    assert_nothing_written(tmp_path / "out")


def test_the_trace_names_the_same_binding(tmp_path):
    """Built from Python (no eager run first), the trace's failure gets the same fix."""
    from aotcombo.builder.trace.diagnosis import export_failure

    namespace = {}
    exec(compile(CACHED, "model.py", "exec"), namespace)
    error = export_failure(namespace["get_model"](), AttributeError(
        "'FakeTensor' object has no attribute 'get_seq_length'"), 2)
    assert "go to forward(x, cache, mask) by position, so to x, cache" in str(error)


def test_model_that_runs_on_the_gpu_alone_builds(capsys, tmp_path):
    """The eager run on the CPU only diagnoses a failed build: a model that refuses CPU tensors
    builds (its trace runs on fake CUDA tensors)."""
    gpu_only = MLP.replace("    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))", """\
    return GpuOnly()


class GpuOnly(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(32, 16)

    def forward(self, x):
        if not x.is_cuda:
            raise RuntimeError("this model runs on a GPU")
        return self.linear(x)""")
    code, out, err = run(capsys, write(tmp_path, gpu_only), "--out", tmp_path / "out", "--no-native")
    assert code == 0, err
    assert "fails on its own example inputs" not in err
    assert list((tmp_path / "out").glob("*.whl")), out


# --- arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, fragment", [("sm_8x", "unknown arch"), ("sm_70", "unsupported arch sm_70"),
                                            (",", "no arch given")])
def test_bad_arch(capsys, mlp, tmp_path, arch, fragment):
    code, _, err = run(capsys, mlp, "--arch", arch, "--out", tmp_path / "out")
    assert code == 2
    assert_one_error(err, fragment)
    assert_nothing_written(tmp_path / "out")


@pytest.mark.parametrize("option, value, fragment", [("--name", "os", "cannot be a package name"),
                                                     ("--version-tag", "v1 final",
                                                      "not a valid Python package version"),
                                                     ("--jobs", "0", "need at least 1")])
def test_bad_option(capsys, mlp, tmp_path, option, value, fragment):
    code, _, err = run(capsys, mlp, option, value, "--out", tmp_path / "out")
    assert code == 2
    assert_one_error(err, fragment)
    assert_nothing_written(tmp_path / "out")


# --- environment ------------------------------------------------------------------------------


def test_wrong_torch_version(capsys, mlp, tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    code, _, err = run(capsys, mlp, "--out", tmp_path / "out")
    assert code == 6
    assert_one_error(err, "builds with torch 2.14.x", "this environment has torch 2.13.0",
                     "pip install 'torch==2.14.*'")
    assert_nothing_written(tmp_path / "out")


def test_missing_build_dependency(capsys, mlp, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    code, _, err = run(capsys, mlp, "--out", tmp_path / "out")
    assert code == 6
    assert_one_error(err, "jinja2 is not installed", "pip install 'jinja2>=3.1'")
    assert_nothing_written(tmp_path / "out")


def test_missing_build_dependency_in_a_fresh_process(tmp_path):
    code = ("import sys; sys.modules['jinja2'] = None; from aotcombo.tools.cli import main; "
            f"sys.exit(main(['build', {str(tmp_path / 'm.py')!r}, '--out', {str(tmp_path / 'out')!r}]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 6, run.stderr
    assert_one_error(run.stderr, "jinja2 is not installed")
    assert "Traceback" not in run.stderr


# --- the Python API ---------------------------------------------------------------------------


@pytest.mark.parametrize("inputs, named", [(([torch.randn(3, 8)],), "example input 0 is a list"),
                                           ((torch.randn(3, 8), 2.0), "example input 1 is a float"),
                                           ({torch.randn(3, 8)}, "example_inputs is a set")])
def test_python_api_names_an_input_that_is_not_a_tensor(inputs, named, tmp_path):
    """``build_package`` (the Python API: no model file to check them) with a list of images,
    as torchvision's detection models take, a number, or a set: a UsageError naming the
    input and the fix, not an AttributeError from deep inside the build."""
    from aotcombo.builder.pipeline import build_package
    from aotcombo.errors import UsageError

    with pytest.raises(UsageError) as info:
        build_package(torch.nn.Linear(8, 8), inputs, arch=["sm_90"], out=tmp_path / "dist", cache=False)
    assert named in str(info.value) and "tuple of tensors" in info.value.fix
    assert not (tmp_path / "dist").exists()
