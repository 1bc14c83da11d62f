"""Build failures in the model, its kernels and the output: an op that cannot be lowered,
another library's custom op, a Triton compile error (in-process and in a worker process), an
unwritable --out and a full disk. Each is a one-paragraph message with a fix, its own exit
status, no traceback, and nothing written to --out (``_cli_helpers``).

The CLI runs in-process (``aotcombo.tools.cli.main([...])``). How the harder cases are triggered:

* an op that cannot be lowered: a model with a data-dependent shape (``x[x > 0]``);
* Triton compile error: ``codegen_combo.render_combo`` monkeypatched to add a broken
  statement to every combo kernel (real Triton fails on it, in-process and in a
  worker process);
* unwritable --out: a path whose parent is a file (we run as root, so permission
  bits would not stop us);
* disk full: the wheel's partial file is replaced by one whose writes fail with
  ENOSPC after 4 kB (``package._open_partial``), as /dev/full would.
"""

from __future__ import annotations

import errno
import io
import shutil
import time
from pathlib import Path

import pytest
from aotcombo.builder import pipeline
from aotcombo.builder.codegen import combo as codegen_combo
from aotcombo.builder.compile import scheduler as compile_scheduler
from aotcombo.builder.compile import triton_job as compile_triton_job

from aotcombo.builder.package import wheel as package
from aotcombo.tools.cli import main

from _cli_helpers import assert_nothing_written, assert_one_error, run, write

pytestmark = pytest.mark.usefixtures("cache_env")


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


GUARDED = """\
import torch


class Guarded(torch.nn.Module):
    def forward(self, x):
        if x.dtype == torch.float16 and not torch.isfinite(x).all():
            x = x.clamp(-100.0, 100.0)
        return x * 2


def get_model():
    return Guarded()


def get_example_inputs():
    return (torch.randn(4, 8, dtype=torch.DTYPE),)
"""


def test_a_float16_overflow_guard_says_to_build_in_bfloat16(capsys, tmp_path):
    """transformers' float16 guard (BART, Marian): a branch on the values, in float16 only."""
    path = write(tmp_path, GUARDED.replace("DTYPE", "float16"))
    code, _, err = run(capsys, path, "--arch", "sm_90", "--out", tmp_path / "out")
    assert code == 4
    assert_one_error(err, "unsupported model", "model.py:6", "build the model in bfloat16")
    assert_nothing_written(tmp_path / "out")
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    code, _, err = run(capsys, write(bf16, GUARDED.replace("DTYPE", "bfloat16")), "--arch", "sm_90",
                       "--out", tmp_path / "out")
    assert code == 0, err


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
