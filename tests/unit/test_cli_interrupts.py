"""Interrupts, internal errors and bad packages to inspect, and the CLI end to end as a user
runs it (a subprocess): a missing model file, a real SIGINT while it traces, and compile
workers that leave with the main process. Each failure is a one-paragraph message (or the
interrupt's one line), its own exit status, no traceback, and nothing written to --out
(``_cli_helpers``).

Ctrl-C comes as ``KeyboardInterrupt`` raised from the compile step (in-process), and as a
real SIGINT sent to a subprocess while it traces.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from aotcombo.builder import pipeline
from aotcombo.builder.compile import scheduler as compile_scheduler

from _cli_helpers import ROOT, assert_nothing_written, assert_one_error, run

pytestmark = pytest.mark.usefixtures("cache_env")


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
