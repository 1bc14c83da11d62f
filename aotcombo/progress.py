"""Progress on long builds: stages with timings, counters for kernel compiles.

On a terminal the current stage and counter rewrite one status line; elsewhere
(CI logs, pipes) every stage prints one plain line when it ends, and counters
print only their last value (every value with ``verbose``). ``quiet`` prints
nothing; errors are the CLI's business, not the reporter's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time


class Reporter:
    def __init__(self, quiet: bool = False, verbose: bool = False, stream=None):
        self.quiet = quiet
        self.verbose = verbose
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", None) and self.stream.isatty())
        self.timings: dict[str, float] = {}
        self._status = ""  # the status line on a terminal, "" when none is shown
        self._lock = threading.Lock()  # counters may be bumped from a pool's callback thread

    # --- plain lines ------------------------------------------------------------

    def line(self, text: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self._clear()
            print(f"aotcombo: {text}", file=self.stream, flush=True)
            self._redraw()

    def detail(self, text: str) -> None:
        if self.verbose:
            self.line(text)

    def warning(self, text: str) -> None:
        """Printed even with ``quiet``: something the user should act on, not fatal."""
        with self._lock:
            self._clear()
            print(f"aotcombo: warning: {text}", file=self.stream, flush=True)
            self._redraw()

    # --- stages and counters -----------------------------------------------------

    @contextlib.contextmanager
    def stage(self, text: str, timing_key: str | None = None):
        """A stage: a status line while it runs, one line with its time when it ends."""
        start = time.perf_counter()
        self._set_status(f"{text} ...")
        ok = False
        try:
            yield
            ok = True
        finally:
            elapsed = time.perf_counter() - start
            key = timing_key or text
            self.timings[key] = self.timings.get(key, 0.0) + elapsed
            self._set_status("")
            if ok:
                self.line(f"{text} ({elapsed:.1f} s)")

    def count(self, text: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.tty:
            self._set_status(f"{text} {done}/{total}")
            if done == total:
                self._set_status("")
                self.line(f"{text} {done}/{total}")
        elif self.verbose or done == total:
            self.line(f"{text} {done}/{total}")

    # --- the terminal status line -------------------------------------------------

    def _set_status(self, text: str) -> None:
        if self.quiet or not self.tty:
            return
        with self._lock:
            self._clear()
            self._status = text
            self._redraw()

    def _clear(self) -> None:
        if self.tty and self._status:
            print("\r\x1b[2K", end="", file=self.stream, flush=True)

    def _redraw(self) -> None:
        if self.tty and self._status and not self.quiet:
            print(f"aotcombo: {self._status}", end="\r", file=self.stream, flush=True)

    def close(self) -> None:
        """Clear the status line (before an error message is printed)."""
        with self._lock:
            self._clear()
            self._status = ""
