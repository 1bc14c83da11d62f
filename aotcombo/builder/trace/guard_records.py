"""Where each guard on the inputs' sizes came from, while a dynamic build traces and compiles.

A guard is torch's record that the program assumed something of a size (``s31 < 4``). The
errors that refuse a range (``axis_errors``: export's; ``specialization``: one added while
compiling) name the model's line that needs it: the innermost frame of the model's code on the
Python stack when the guard was added (export runs the model's forward), or else in the stack
trace of the exported program's node being traced alone (``tracing``: ``direct.py``),
decomposed or lowered then.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from unittest import mock

from ..inputs.usercode import VERSIONED, code_kind

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_traced: list = []  # the exported program's nodes being traced alone, innermost last


@dataclass(frozen=True)
class Record:
    expr: str  # the guard as torch prints it, over its symbols
    sources: dict  # symbol -> export's source of that size (``L['input_ids'].size()[1]``)
    frames: tuple  # the model's frames, innermost last: {"filename", "line", "name", "loc"}


@contextlib.contextmanager
def tracing(node):
    """While ``node`` of the exported program is traced alone: the node a guard is added for."""
    _traced.append(node)
    try:
        yield
    finally:
        _traced.pop()


@contextlib.contextmanager
def recording():
    """While tracing: a ``Record`` of each guard added on the inputs' sizes, in a list yielded."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    records, log = [], ShapeEnv._log_guard

    def logged(env, prefix, guard, forcing_spec):
        log(env, prefix, guard, forcing_spec)
        sources = {str(v): k for k, v in env.source_to_var.items() if v in guard.free_symbols}
        if sources:
            records.append(Record(str(guard), sources, tuple(_model_frames())))

    with mock.patch.object(ShapeEnv, "_log_guard", logged):
        yield records


def model_stack(num_frames: int) -> list[dict]:
    """torch's ``structured.get_user_stack`` that also passes over aotcombo's frames, each
    frame's file by name (torch's are numbers into a table the report may not hold)."""
    from torch.utils._traceback import CapturedTraceback

    frames = CapturedTraceback.extract().summary()
    theirs = [i for i, f in enumerate(frames) if code_kind(f.filename) != VERSIONED]
    end = theirs[-1] + 1 if theirs else len(frames)
    return [{"line": f.lineno, "name": f.name, "filename": f.filename, "loc": f.line or ""}
            for f in frames[max(0, end - num_frames):end]]


def where(frames) -> str:
    """``modeling_detr.py:289 (`mask = ...`)``: the innermost of ``frames`` in the model's code (the
    user's or a library's: not torch's or ours, nor code exec'd from a string, make_fx's), or ""."""
    theirs = [f for f in frames if f.get("filename") and not f["filename"].startswith("<")
              and code_kind(f["filename"]) != VERSIONED]
    if not theirs:
        return ""
    f = theirs[-1]
    return f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} (`{f['loc'].strip()}`)"


def _model_frames() -> list[dict]:
    """The model's frames on the stack, or those of the node being traced, decomposed or lowered."""
    stack = model_stack(4)
    if where(stack):
        return stack
    return [{"filename": file, "line": int(line), "name": name, "loc": loc}
            for file, line, name, loc in _FRAME.findall(_node_stack_trace() or "")]


def _node_stack_trace() -> str | None:
    from torch._inductor.virtualized import V
    from torch.fx import traceback as fx_traceback

    if _traced and _traced[-1].meta.get("stack_trace"):
        return _traced[-1].meta["stack_trace"]
    if fx_traceback.has_preserved_node_meta() and fx_traceback.get_current_meta().get("stack_trace"):
        return fx_traceback.get_current_meta()["stack_trace"]
    try:
        return V.graph.current_node.meta.get("stack_trace")
    except Exception:  # noqa: BLE001 - no graph being lowered
        return None
