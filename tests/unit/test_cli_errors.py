"""Every build failure a user can meet: a one-paragraph message with a fix, its own
exit status, no traceback, and nothing written to --out.

Most cases run the CLI in-process (``aotcombo.tools.cli.main([...])``); two run it as
a subprocess, end to end (a missing model file, and Ctrl-C during a trace).
How the harder ones are triggered:

* wrong torch version: ``torch.__version__`` monkeypatched to 2.13.0;
* missing build dependency: ``sys.modules["jinja2"] = None`` (``find_spec`` then fails);
* an op that cannot be lowered: a model with a data-dependent shape (``x[x > 0]``);
* Triton compile error: ``codegen_combo.render_combo`` monkeypatched to add a broken
  statement to every combo kernel (real Triton fails on it, in-process and in a
  worker process);
* unwritable --out: a path whose parent is a file (we run as root, so permission
  bits would not stop us);
* disk full: the wheel's partial file is replaced by one whose writes fail with
  ENOSPC after 4 kB (``package._open_partial``), as /dev/full would;
* Ctrl-C: ``KeyboardInterrupt`` raised from the compile step (in-process), and a
  real SIGINT sent to a subprocess while it traces.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from aotcombo.builder import pipeline
from aotcombo.builder.codegen import combo as codegen_combo
from aotcombo.builder.compile import scheduler as compile_scheduler
from aotcombo.builder.compile import triton_job as compile_triton_job

from aotcombo.builder.package import wheel as package
from aotcombo.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]

MLP = """\
import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))


def get_example_inputs():
    return (torch.randn(8, 32, generator=torch.Generator().manual_seed(1)),)
"""


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One build cache for the module: the good model is traced once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def cache_env(shared_cache, monkeypatch):
    monkeypatch.setenv("AOTCOMBO_CACHE_DIR", str(shared_cache))
    monkeypatch.delenv("AOTCOMBO_NO_CACHE", raising=False)


@pytest.fixture
def mlp(tmp_path):
    path = tmp_path / "mlp.py"
    path.write_text(MLP)
    return path


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def run(capsys, *argv):
    code = main(["build", *map(str, argv)] if argv and argv[0] not in ("inspect", "cache") else list(map(str, argv)))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, captured.err


def assert_one_error(err, *fragments):
    lines = [line for line in err.splitlines() if line.startswith("aotcombo: error:")]
    assert len(lines) == 1, err
    assert "  fix: " in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def assert_nothing_written(out: Path):
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))


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


# --- the model and its kernels ---------------------------------------------------------------


def test_op_that_cannot_be_lowered(capsys, tmp_path):
    path = write(tmp_path, """\
import torch


class Positive(torch.nn.Module):
    def forward(self, x):
        return x[x > 0] * 2


def get_model():
    return Positive()


def get_example_inputs():
    return (torch.randn(16),)
""")
    code, _, err = run(capsys, path, "--arch", "sm_90", "--out", tmp_path / "out")
    assert code == 4
    assert_one_error(err, "unsupported model", "model.py")
    assert_nothing_written(tmp_path / "out")


def test_another_library_s_custom_op_is_refused(capsys, tmp_path):
    """A package runs with torch alone: a call into another library's custom op (registered
    by transformers, torchvision, a user's extension: here by the model file) is a build
    error naming the op and the model's line, not a package that fails where it is loaded."""
    path = write(tmp_path, """\
import torch


@torch.library.custom_op("otherlib::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


class UsesIt(torch.nn.Module):
    def forward(self, x):
        return torch.relu(torch.ops.otherlib.twice(x + 1))


def get_model():
    return UsesIt()


def get_example_inputs():
    return (torch.randn(16),)
""")
    code, _, err = run(capsys, path, "--arch", "sm_90", "--out", tmp_path / "out")
    assert code == 4
    assert_one_error(err, "unsupported model", "otherlib::twice.default at model.py:16", "torch alone")
    assert_nothing_written(tmp_path / "out")


def _broken(render):
    def render_combo(combo, **options):
        source = render(combo, **options)
        # A statement Triton rejects: arange needs a power-of-two range.
        return source.replace("    pid = tl.program_id(0)\n",
                              "    pid = tl.program_id(0)\n    _bad = tl.arange(0, 3)\n", 1)

    return render_combo


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_triton_compile_error(capsys, mlp, tmp_path, monkeypatch, jobs):
    monkeypatch.setattr(pipeline, "render_combo", _broken(codegen_combo.render_combo))
    code, _, err = run(capsys, mlp, "--arch", "sm_90", "--out", tmp_path / "out", "--jobs", jobs)
    assert code == 5
    assert_one_error(err, "kernel compile failed", "Triton could not compile combo_0 for sm_90", "arange")
    saved = Path(err.split("the kernel source is saved at ")[1].split(";")[0])
    assert saved.is_file() and "_bad = tl.arange(0, 3)" in saved.read_text()
    shutil.rmtree(saved.parent)
    assert_nothing_written(tmp_path / "out")


def test_compile_error_in_a_worker_process_comes_back_whole(tmp_path):
    import concurrent.futures
    import multiprocessing
    import pickle

    source = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x):\n    _bad = tl.arange(0, 3)\n"
    job = compile_triton_job.Job("sm_90/k", source, "k", (("x", "*fp32"),), (), 90, 4)
    error = compile_triton_job.compile_error(job, ValueError("boom"))
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.message, copy.fix, copy.detail) == (type(error), error.message, error.fix, error.detail)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(compile_triton_job.CompileError) as info:
            pool.submit(compile_scheduler._run_in_worker, job, str(tmp_path / "triton")).result()
    assert "Triton could not compile k for sm_90" in info.value.message
    assert "saved at" in info.value.fix and info.value.detail and "arange" in info.value.detail


def test_compile_error_verbose_shows_the_traceback(capsys, mlp, tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "render_combo", _broken(codegen_combo.render_combo))
    code = main(["build", str(mlp), "--arch", "sm_90", "--out", str(tmp_path / "out"), "-j", "1", "-v"])
    err = capsys.readouterr().err
    assert code == 5 and "Traceback" in err


# --- output -------------------------------------------------------------------------------------


def test_out_under_a_file(capsys, mlp, tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    started = time.perf_counter()
    code, _, err = run(capsys, mlp, "--out", blocker / "sub")
    assert code == 7
    assert_one_error(err, "cannot write output", "file.txt is a file, not a folder")
    assert time.perf_counter() - started < 30  # caught before the model is even loaded
    assert blocker.read_text() == "not a folder"


def test_out_is_a_file(capsys, mlp, tmp_path):
    blocker = tmp_path / "dist"
    blocker.write_text("")
    code, _, err = run(capsys, mlp, "--out", blocker)
    assert code == 7
    assert_one_error(err, "is a file, not a folder")


class _FullDisk(io.RawIOBase):
    """A file whose writes fail with ENOSPC past ``room`` bytes, like one on a full disk."""

    def __init__(self, path: Path, room: int = 4096):
        self.file = open(path, "wb")
        self.room = room

    def writable(self):
        return True

    def write(self, data):
        if self.room < len(data):
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def fileno(self):
        return self.file.fileno()

    def close(self):
        self.file.close()
        super().close()


def test_disk_full(capsys, mlp, tmp_path, monkeypatch):
    def open_partial(folder, final_name):
        path = folder / f".{final_name}.test.partial"
        return _FullDisk(path), path

    monkeypatch.setattr(package, "_open_partial", open_partial)
    out = tmp_path / "new" / "dist"
    code, _, err = run(capsys, mlp, "--arch", "sm_90", "--out", out)
    assert code == 7
    assert_one_error(err, "no space left on the device", "nothing was written")
    assert not (tmp_path / "new").exists()  # the folders the build created are gone again


def test_disk_full_in_an_existing_folder_leaves_it_as_it_was(capsys, mlp, tmp_path, monkeypatch):
    def open_partial(folder, final_name):
        path = folder / f".{final_name}.test.partial"
        return _FullDisk(path), path

    monkeypatch.setattr(package, "_open_partial", open_partial)
    out = tmp_path / "dist"
    out.mkdir()
    (out / "other.whl").write_bytes(b"keep me")
    code, _, _ = run(capsys, mlp, "--arch", "sm_90", "--out", out)
    assert code == 7
    assert sorted(p.name for p in out.iterdir()) == ["other.whl"]


# --- interrupts and bugs -----------------------------------------------------------------------------


def test_ctrl_c(capsys, mlp, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(compile_scheduler, "run_job", interrupted)
    out = tmp_path / "out"
    code, _, err = run(capsys, mlp, "--arch", "sm_80", "--out", out, "--no-cache", "-j", "1")
    assert code == 130
    assert "aotcombo: interrupted; nothing was written" in err
    assert_nothing_written(out)


def test_internal_error(capsys, mlp, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(pipeline, "make_plan", broken)
    code, _, err = run(capsys, mlp, "--arch", "sm_90", "--out", tmp_path / "out")
    assert code == 70
    assert "aotcombo: internal error: RuntimeError: a bug\n  nothing was written; rerun with --verbose" in err
    assert "second line" not in err
    assert_nothing_written(tmp_path / "out")


def test_inspect_errors(capsys, tmp_path):
    code, _, err = run(capsys, "inspect", tmp_path / "missing.whl")
    assert code == 8
    assert_one_error(err, "no wheel, folder or installed package named")
    (tmp_path / "fake.whl").write_bytes(b"not a zip")
    code, _, err = run(capsys, "inspect", tmp_path / "fake.whl")
    assert code == 8
    assert_one_error(err, "not a wheel")
    code, _, err = run(capsys, "inspect", "json")  # a module, not an aotcombo package
    assert code == 8
    assert_one_error(err, "not an aotcombo package")


# --- end to end, as a user runs it ---------------------------------------------------------------------


def _cli(*argv):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # As from a terminal: Ctrl-C is not ignored (a test runner started in the
    # background may ignore SIGINT, and children inherit that); its own process
    # group, so a test that fails can clean up everything it started.
    return subprocess.Popen([sys.executable, "-m", "aotcombo", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _communicate(process, timeout=180):
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise


def test_subprocess_missing_model_file(tmp_path):
    process = _cli("build", tmp_path / "nope.py", "--out", tmp_path / "out")
    out, err = _communicate(process)
    assert process.returncode == 3, err
    assert err.startswith("aotcombo: error: model file: model file ") and "Traceback" not in err
    assert out == ""
    assert_nothing_written(tmp_path / "out")


def test_an_interrupt_python_wrapped_is_an_interrupt(capsys, mlp, tmp_path, monkeypatch):
    """Ctrl-C during a class's ``__set_name__`` (a module imported mid-build) reaches us, on Python
    3.11, as ``RuntimeError("Error calling __set_name__ ...")`` caused by it: still an interrupt."""
    from aotcombo.tools import cli

    def build(args, reporter):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise RuntimeError("Error calling __set_name__ on 'cached_property' instance") from interrupt

    monkeypatch.setitem(cli.COMMANDS, "build", build)
    code, _, err = run(capsys, mlp, "--out", tmp_path / "out")
    assert code == 130 and err.strip() == "aotcombo: interrupted; nothing was written", err


def test_subprocess_sigint_while_tracing(mlp, tmp_path):
    out = tmp_path / "out"
    process = _cli("build", mlp, "--arch", "sm_80,sm_90", "--out", out, "--no-cache", "-j", "2")
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the model is loaded: the first trace starts
        line = process.stderr.readline()
        lines.append(line)
        if line.startswith("aotcombo: load ") or not line:
            break
    time.sleep(1.0)  # into the trace
    process.send_signal(signal.SIGINT)
    _, rest = _communicate(process)  # returns once every process holding its stderr has ended
    err = "".join(lines) + rest
    assert process.returncode == 130, err
    assert "aotcombo: interrupted; nothing was written" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert_nothing_written(out)


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_workers_leave_with_the_main_process(tmp_path, method):
    """A main process that ends abruptly (the CLI's fast exit, a crash) takes its
    compile workers, and the forkserver, with it."""
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from aotcombo.builder.cache.store import Cache
from aotcombo.builder.compile import scheduler as compile_scheduler
from aotcombo.progress import Reporter
scheduler = compile_scheduler.Scheduler(Cache(None), 2, Reporter(quiet=True), None, method={method!r})
scheduler.start_pool()
scheduler.starting.join()
print(*[p.pid for p in scheduler.pool._processes.values()], flush=True)
os._exit(0)
"""
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    out, _ = _communicate(process)
    pids = [int(p) for p in out.split()]
    assert pids
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


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
