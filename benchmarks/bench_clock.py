"""The clock of a bench.py run: its time budget, the log line's timestamp and the limit on one
torch.compile (SIGALRM).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time


class CompileTimeout(BaseException):
    """Raised by SIGALRM when a torch.compile runs too long. A BaseException: torch's compile
    stack catches Exception in places (a TimeoutError was swallowed there, seen on CPU)."""


class Clock:
    def __init__(self, budget_s: float):
        self.t0, self.budget = time.perf_counter(), budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget - self.elapsed()


CLOCK = Clock(0)


def log(msg: str) -> None:
    print(f"[{CLOCK.elapsed():6.1f}s] {msg}", flush=True)


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str):
    """Raise CompileTimeout in the main thread after ``seconds`` (SIGALRM; no-op elsewhere)."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise CompileTimeout(f"{what} took over {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
