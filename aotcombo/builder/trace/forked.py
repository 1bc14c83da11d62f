"""Traces side by side, in a child process forked from the build's, on a second CPU:

- the next arch's (or batch size's) trace while this process traces one (``cached.trace_beside``:
  the child starts with the model and the example inputs in its memory);
- else a dynamic build's size classes: each class but the largest in a child, forked once the
  export and its decompositions are done, while this process compiles the largest
  (``entry.trace_classes``).
Each trace is seconds of one CPU, in torch.export and Inductor (BERT-base, --dynamic
batch=1:32,seq=1:512: two classes in 5.9 + 4.0 s one after the other).

A child sends back what the trace cache stores (``plain``: the plain-data graph, the outputs'
nesting, the constants the trace lifted); the build's process takes the weights from its own
model. A child that fails, or does not answer within ``WAIT_FACTOR`` times the time this
process took meanwhile (a lock held at the fork, never released in the child), is stopped
and its trace made here again: the error a user sees is the one this process raises, and a
build is never lost to the fork.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import time
import warnings

WAIT_FACTOR, WAIT_MIN_S = 3.0, 60.0
DISABLE = "AOTCOMBO_TRACE_PROCESSES"  # "1": every class traced in this process


def available() -> bool:
    """Whether a child may trace beside this process: Linux (fork without the caveats of macOS's
    system libraries), and a second CPU."""
    if os.environ.get(DISABLE) == "1" or not sys.platform.startswith("linux"):
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cpus >= 2


@contextlib.contextmanager
def disabled():
    """No child forked inside (``available`` False): the CPUs are taken."""
    before = os.environ.get(DISABLE)
    os.environ[DISABLE] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[DISABLE]
        else:
            os.environ[DISABLE] = before


class Child:
    """A forked child computing ``fn()``; ``result`` waits for its value."""

    def __init__(self, fn):
        read, write = os.pipe()
        try:
            with warnings.catch_warnings():  # Python 3.12+ warns of fork with threads: see the module's note
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except BaseException:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:
            os.close(read)
            _run_child(fn, write)  # never returns
        os.close(write)
        self.pid, self.read, self.started = pid, read, time.monotonic()

    def result(self, timeout: float):
        """``(value, None)``, or ``(None, why)`` when the child failed or took past ``timeout`` s."""
        chunks, deadline, why = [], time.monotonic() + timeout, None
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.read], [], [], left)[0]:
                    why = f"no answer in {timeout:.0f} s"
                    break
                chunk = os.read(self.read, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            self.stop()
        if why is not None:
            return None, why
        try:
            status, value = pickle.loads(b"".join(chunks))
        except Exception as exc:  # noqa: BLE001 - a child that died before writing
            return None, f"no result ({type(exc).__name__})"
        return (value, None) if status == "ok" else (None, value)

    def stop(self) -> None:
        """End the child (if still running) and reap it; nothing once done."""
        if self.pid is None:
            return
        os.close(self.read)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.pid = None


def _run_child(fn, write: int) -> None:
    """In the child: ``fn()``, its value or its error pickled to ``write``, then leave at once
    (no exit handlers: the parent's temporary folders and pools are the parent's)."""
    code = 0
    try:
        import torch

        torch.set_num_threads(1)  # the parent keeps its CPUs; and no thread pool inherited mid-use
        payload = pickle.dumps(("ok", fn()), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which traces the class itself
        payload = pickle.dumps(("failed", f"{type(exc).__name__}: {str(exc)[:500]}"))
        code = 1
    try:
        with os.fdopen(write, "wb") as out:
            out.write(payload)
    finally:
        os._exit(code)


def wait_seconds(own_seconds: float) -> float:
    """How long to wait for a child once this process has traced its own class."""
    return max(WAIT_MIN_S, WAIT_FACTOR * own_seconds)
