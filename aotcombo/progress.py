"""Progress on long builds: stages with timings, counters for kernel compiles.

On a terminal a counter rewrites its line; elsewhere (CI logs, pipes) every
stage prints one plain line when it ends. ``quiet`` prints nothing.
"""

from __future__ import annotations

import contextlib
import sys
import time


class Reporter:
    def __init__(self, quiet: bool = False, verbose: bool = False, stream=None):
        self.quiet = quiet
        self.verbose = verbose
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.timings: dict[str, float] = {}

    def line(self, text: str) -> None:
        if not self.quiet:
            print(f"aotcombo: {text}", file=self.stream, flush=True)

    def detail(self, text: str) -> None:
        if self.verbose:
            self.line(text)

    @contextlib.contextmanager
    def stage(self, text: str):
        start = time.perf_counter()
        if self.tty and not self.quiet:
            print(f"aotcombo: {text} ...", end="\r", file=self.stream, flush=True)
        yield
        elapsed = time.perf_counter() - start
        self.timings[text] = self.timings.get(text, 0.0) + elapsed
        if self.tty and not self.quiet:
            print("\x1b[2K", end="", file=self.stream)
        self.line(f"{text} ({elapsed:.1f} s)")

    def count(self, text: str, done: int, total: int) -> None:
        if self.quiet:
            return
        if self.tty:
            end = "\n" if done == total else "\r"
            print(f"\x1b[2Kaotcombo: {text} {done}/{total}", end=end, file=self.stream, flush=True)
        elif self.verbose or done == total:
            self.line(f"{text} {done}/{total}")
