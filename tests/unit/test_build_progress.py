"""A build's progress output (``aotcombo.progress.Reporter``): plain lines when not a terminal,
one rewritten line on a terminal, quiet and verbose, and no timing line for a stage that fails."""

from __future__ import annotations

import io

import pytest

from aotcombo.progress import Reporter


# --- progress ----------------------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    reporter = Reporter(stream=stream)
    with reporter.stage("compile 3 kernels"):
        for i in range(1, 4):
            reporter.count("compiled kernels", i, 3)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "aotcombo: compiled kernels 3/3"
    assert lines[1].startswith("aotcombo: compile 3 kernels (") and lines[1].endswith(" s)")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_progress_on_a_terminal_rewrites_one_line():
    stream = _Tty()
    reporter = Reporter(stream=stream)
    with reporter.stage("compile 2 kernels"):
        reporter.count("compiled kernels", 1, 2)
        reporter.count("compiled kernels", 2, 2)
    text = stream.getvalue()
    assert "compile 2 kernels ...\r" in text and "compiled kernels 1/2\r" in text and "\x1b[2K" in text
    assert text.rstrip().endswith(" s)")


def test_progress_quiet_and_verbose():
    stream = io.StringIO()
    quiet = Reporter(quiet=True, stream=stream)
    with quiet.stage("x"):
        quiet.count("y", 1, 1)
        quiet.detail("z")
    assert stream.getvalue() == ""
    verbose = Reporter(verbose=True, stream=stream)
    verbose.count("compiled kernels", 1, 2)
    verbose.detail("more")
    assert stream.getvalue().splitlines() == ["aotcombo: compiled kernels 1/2", "aotcombo: more"]


def test_stage_that_fails_prints_no_timing_line():
    stream = _Tty()
    reporter = Reporter(stream=stream)
    with pytest.raises(ValueError):
        with reporter.stage("trace"):
            raise ValueError
    assert "(" not in stream.getvalue() and stream.getvalue().endswith("\x1b[2K")
