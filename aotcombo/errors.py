"""Build errors a user can meet, each with its own exit status and a fix."""

from __future__ import annotations


class BuildError(Exception):
    """An expected build failure: printed as one paragraph, no traceback."""

    exit_code = 1
    title = "build failed"

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message}\n  fix: {self.fix}"


class UsageError(BuildError):
    exit_code = 2
    title = "bad arguments"


class ModelFileError(BuildError):
    exit_code = 3
    title = "model file"


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
