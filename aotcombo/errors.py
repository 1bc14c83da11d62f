"""Build errors a user can meet, each with its own exit status and a fix.

Exit statuses (``aotcombo --help`` lists them too):

====  =======================  ==================================================
code  class                    when
====  =======================  ==================================================
1     BuildError               any other expected failure
2     UsageError               bad arguments: unknown arch, bad --name/--version
3     ModelFileError           model file missing, raising, lacking functions, or
                               the model failing on its own example inputs
4     UnsupportedModelError    torch.export / Inductor cannot lower the model
5     CompileError             Triton cannot compile a generated kernel
6     EnvironmentError_        wrong torch version, a missing build dependency
7     OutputError              --out not writable, disk full
8     InspectError             ``aotcombo inspect``: no such package, unreadable
70    (internal error)         a bug in aotcombo: rerun with --verbose, report it
130   (interrupted)            Ctrl-C; nothing was written
====  =======================  ==================================================
"""

from __future__ import annotations

INTERNAL_ERROR = 70  # EX_SOFTWARE
INTERRUPTED = 130  # 128 + SIGINT


class BuildError(Exception):
    """An expected build failure: printed as one paragraph, no traceback."""

    exit_code = 1
    title = "build failed"

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix
        # A worker process's formatted traceback (exceptions lose __cause__ on
        # the way back from a process pool); shown with --verbose.
        self.detail: str | None = None

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"

    def __reduce__(self):
        # Keep ``fix`` and ``detail`` when pickled (process pool results).
        return (_rebuild, (type(self), self.message, self.fix, self.detail))


def _rebuild(cls, message, fix, detail):
    exc = cls(message, fix)
    exc.detail = detail
    return exc


class UsageError(BuildError):
    exit_code = 2
    title = "bad arguments"


class ModelFileError(BuildError):
    exit_code = 3
    title = "model file"


# The fix for a kernel that cannot follow a dynamic size at run time
BUCKETS_INSTEAD = ("build that axis with buckets instead of --dynamic (--batch SIZES for the batch, "
                   "--buckets AXIS=SIZES for another)")


class UnsupportedModelError(BuildError):
    exit_code = 4
    title = "unsupported model"


class CompileError(BuildError):
    exit_code = 5
    title = "kernel compile failed"


class EnvironmentError_(BuildError):
    exit_code = 6
    title = "build environment"


class OutputError(BuildError):
    exit_code = 7
    title = "cannot write output"


class InspectError(BuildError):
    exit_code = 8
    title = "cannot inspect"


EXIT_STATUSES = (
    (0, "done"),
    (UsageError.exit_code, "bad arguments"),
    (ModelFileError.exit_code, "model file (missing, raising, or the model fails on its inputs)"),
    (UnsupportedModelError.exit_code, "unsupported model"),
    (CompileError.exit_code, "kernel compile failed"),
    (EnvironmentError_.exit_code, "build environment"),
    (OutputError.exit_code, "cannot write output"),
    (InspectError.exit_code, "inspect: no such package"),
    (INTERNAL_ERROR, "internal error (rerun with --verbose and report it)"),
    (INTERRUPTED, "interrupted"),
)
