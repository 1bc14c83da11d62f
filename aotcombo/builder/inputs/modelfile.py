"""Load a user's model file: ``get_model()`` and ``get_example_inputs()``.

The file is run the way ``python model.py`` would see it (its folder first on
``sys.path``, so it can import modules next to it), under a unique module name,
without running its ``if __name__ == "__main__":`` block. ``sys.path`` and
``sys.modules`` are restored afterwards: the model file and the sibling modules
it imported are dropped again, so two model files in different folders can
each have their own ``helpers.py``.

Every problem is a ``ModelFileError`` naming the file, what went wrong and,
for exceptions raised by the user's code, the line of the model file involved.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import itertools
import logging
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from ...errors import ModelFileError
from . import keywords
from .signature import misplaced_input
from .usercode import is_user_file

_counter = itertools.count()
_MAX_MESSAGE = 400


def load_model_file(
    path: str | Path, model_fn: str = "get_model", inputs_fn: str = "get_example_inputs"
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Run the model file at ``path``; return ``(model.eval(), example_inputs)``."""
    shown = str(path)
    path = Path(path)
    if not path.exists():
        raise ModelFileError(
            f"model file {shown} does not exist.",
            fix="pass the path of a Python file that defines get_model() and get_example_inputs()",
        )
    if not path.is_file() or path.suffix != ".py":
        kind = "a folder" if path.is_dir() else "not a .py file"
        raise ModelFileError(
            f"model file {shown} is {kind}; aotcombo reads a Python source file.",
            fix="pass the path of a .py file that defines get_model() and get_example_inputs()",
        )
    path = path.resolve()

    with _model_file_context(path) as module:
        _exec_module(module, path, shown)
        make_model = _get_function(module, model_fn, path, shown)
        make_inputs = _get_function(module, inputs_fn, path, shown)

        model = _call(make_model, model_fn, path, shown)
        if not isinstance(model, nn.Module):
            _not_a_module(model, model_fn, shown)
        inputs = _call(make_inputs, inputs_fn, path, shown)  # by name (a dict) or with None: keywords.bind
        model, inputs = keywords.bind(model, inputs, f"model file {shown}: {inputs_fn}()", ModelFileError)
        inputs = _normalize_inputs(inputs, inputs_fn, shown)

    _check_on_cpu(model, inputs, model_fn, inputs_fn, shown)
    model.eval()
    return model, inputs


def batch_inputs_function(path: str | Path, inputs_fn: str = "get_example_inputs"):
    """``make(batch)`` -> the example inputs at that batch size, when ``inputs_fn`` of the
    model file takes a ``batch`` argument; None when it does not (see ``aotcombo.shapes``)."""
    shown, path = str(path), Path(path).resolve()
    with _model_file_context(path) as module:
        _exec_module(module, path, shown)
        make_inputs = _get_function(module, inputs_fn, path, shown)
    try:
        parameters = inspect.signature(make_inputs).parameters
    except (TypeError, ValueError):
        return None
    if "batch" not in parameters and not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return None

    def make(batch: int) -> tuple[torch.Tensor, ...]:
        name = f"{inputs_fn}(batch={batch})"
        return _normalize_inputs(_call(lambda: make_inputs(batch=batch), name, path, shown), name, shown)

    return make


def dynamic_axes_of(path: str | Path, axes_fn: str | None = None):
    """What ``axes_fn()`` of the model file returns (the model's named dynamic axes,
    ``inputs/axes.py``), or None when ``axes_fn`` is not given and ``get_dynamic_axes`` is
    not defined."""
    return defined(path, axes_fn, "get_dynamic_axes")


def defined(path: str | Path, function: str | None, default: str):
    """What ``function()`` of the model file returns, or None when ``function`` is not given
    and the file does not define ``default`` (``get_dynamic_axes``, ``get_tp_plan``)."""
    shown, path = str(path), Path(path).resolve()
    with _model_file_context(path) as module:
        _exec_module(module, path, shown)
        if function is None and not hasattr(module, default):
            return None
        name = function or default
        return _call(_get_function(module, name, path, shown), name, path, shown)


@contextlib.contextmanager
def buffers_kept(model: nn.Module):
    """Run the model without a trace left: the buffers forward updates (a KV cache) are put
    back after, so the package starts from the values the model was given."""
    saved = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)


def on_meta(model: nn.Module) -> list[str]:
    """The names of the model's parameters and buffers on the meta device (shapes and dtypes
    without values: a model too large to make on the build machine, built ``--weights external``)."""
    named = itertools.chain(model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False))
    return [name for name, t in named if t.device.type == "meta"]


def run_eager(model: nn.Module, inputs: tuple[torch.Tensor, ...], path: str | Path | None = None) -> Any:
    """Run ``model(*inputs)`` under ``torch.no_grad()``; return its outputs (None, not run, for
    a model with tensors on the meta device: it has no values to run on; the trace checks it).

    An exception becomes a ``ModelFileError`` pointing at the model file's
    line (``path``, or the file that defines the model's ``forward``).
    """
    if on_meta(model):
        return None
    if path is None:
        path = _source_file_of(model)
    try:
        with torch.no_grad(), buffers_kept(model):
            return model(*inputs)
    except Exception as exc:
        where = _where(exc, Path(path)) if path is not None else ""
        shown = f"model file {path}" if path is not None else "the model"
        raise ModelFileError(
            f"{shown}: the model fails on its own example inputs: {_describe(exc)}{where}.",
            fix=misplaced_input(model, exc, len(inputs))
            or "make the model run in plain PyTorch on the CPU on the inputs from get_example_inputs() "
            "(run the file's functions in Python to see the full traceback)",
        ) from exc


# --- loading --------------------------------------------------------------------


@contextlib.contextmanager
def _model_file_context(path: Path) -> Iterator[Any]:
    folder = str(path.parent)
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_aotcombo_model_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    saved_path = list(sys.path)
    before = set(sys.modules)
    sys.path.insert(0, folder)
    importlib.invalidate_caches()
    sys.modules[name] = module  # dataclasses, typing and pickle look themselves up here
    try:
        yield module
    finally:
        sys.path[:] = saved_path
        _forget_new_modules(before, path.parent)
        sys.modules.pop(name, None)


def _forget_new_modules(before: set[str], folder: Path) -> None:
    """Drop the modules the model file imported from its own folder."""
    old_roots = {n.partition(".")[0] for n in before}
    for name in set(sys.modules) - before:
        if name.partition(".")[0] in old_roots:
            continue  # a new submodule of a package already imported (aotcombo, torch, ...)
        file = getattr(sys.modules[name], "__file__", None)
        if file is None:
            continue
        file = Path(file).resolve()
        if file.is_relative_to(folder) and is_user_file(file):  # not a venv inside the folder
            del sys.modules[name]


class _EnumConstantNotice(logging.Filter):
    """torch 2.14 logs a deprecation warning for each enum torchao registers as a pytree constant
    (transformers imports torchao where it is installed): nothing the model's author can act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "register_constant() on Enum subclasses is deprecated" not in record.getMessage()


_ENUM_CONSTANT_NOTICE = _EnumConstantNotice()


def _exec_module(module, path: Path, shown: str) -> None:
    logging.getLogger("torch.utils._pytree").addFilter(_ENUM_CONSTANT_NOTICE)  # once: the same filter
    try:
        module.__spec__.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        raise ModelFileError(
            f"model file {shown} fails when it is run: {_describe(exc)}{_where(exc, path)}.",
            fix=f"make `python {shown}` run without errors",
        ) from exc


def _get_function(module, name: str, path: Path, shown: str):
    fn = getattr(module, name, None)
    if fn is None:
        defined = sorted(
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == module.__name__
        )
        listing = f"it defines {', '.join(defined)}" if defined else "it defines no public functions or classes"
        raise ModelFileError(
            f"model file {shown} has no function {name}(); {listing}.",
            fix=f"define {name}() in the file, or name the function to use with the matching option",
        )
    if not callable(fn):
        raise ModelFileError(
            f"model file {shown}: {name} is a {type(fn).__name__}, not a function.",
            fix=f"define {name} as a function that takes no arguments",
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if required:
        raise ModelFileError(
            f"model file {shown}: {name}() must be callable with no arguments, "
            f"but it requires {', '.join(required)}.",
            fix=f"give every parameter of {name}() a default value",
        )
    return fn


def _call(fn, name: str, path: Path, shown: str):
    try:
        return fn()
    except (Exception, SystemExit) as exc:
        raise ModelFileError(
            f"model file {shown}: {name}() raised {_describe(exc)}{_where(exc, path)}.",
            fix=f"make {name}() run without errors (call it in Python to see the full traceback)",
        ) from exc


def _not_a_module(obj, name: str, shown: str):
    if isinstance(obj, type) and issubclass(obj, nn.Module):
        got, fix = f"the class {obj.__name__} itself", f"return an instance: {obj.__name__}(...)"
    else:
        got, fix = f"a {_type_name(obj)}", f"make {name}() return a torch.nn.Module"
    raise ModelFileError(
        f"model file {shown}: {name}() must return a torch.nn.Module, but it returned {got}.", fix=fix
    )


def _normalize_inputs(value, name: str, shown: str) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    value = keywords.tensors_of(value, f"model file {shown}: {name}()", ModelFileError)
    if not isinstance(value, (tuple, list)):
        raise ModelFileError(
            f"model file {shown}: {name}() must return a tuple of tensors, "
            f"but it returned a {_type_name(value)}.",
            fix=f"make {name}() return a tuple of CPU tensors, one per positional input of forward(), or a "
                "dict of them keyed by forward's parameter names",
        )
    for i, item in enumerate(value):
        if not isinstance(item, torch.Tensor):
            raise ModelFileError(
                f"model file {shown}: {name}() returned a {type(value).__name__} whose element {i} is a "
                f"{_type_name(item)}, not a tensor; "
                "aotcombo models take only tensors as inputs.",
                fix="return only tensors (make other values constants or attributes of the model)",
            )
    return tuple(value)


def _check_on_cpu(model: nn.Module, inputs, model_fn: str, inputs_fn: str, shown: str) -> None:
    for i, t in enumerate(inputs):
        if t.device.type != "cpu":
            raise ModelFileError(
                f"model file {shown}: input {i} from {inputs_fn}() is on device {t.device}; "
                "example inputs must be CPU tensors (aotcombo compiles on the CPU, without a GPU).",
                fix=f"create the inputs on the CPU in {inputs_fn}() (drop .cuda() / device=...)",
            )
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for pname, t in named:
            if t.device.type not in ("cpu", "meta"):  # meta: shapes only, for --weights external
                raise ModelFileError(
                    f"model file {shown}: the model from {model_fn}() has {kind} {pname} on device "
                    f"{t.device}; the model must be on the CPU (aotcombo compiles without a GPU).",
                    fix=f"return the model on the CPU from {model_fn}() (drop .cuda() / .to(device))",
                )


# --- describing exceptions -------------------------------------------------------


def _type_name(obj) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _describe(exc: BaseException) -> str:
    # A SyntaxError's str() repeats the file and line, which _where() gives.
    text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    text = " ".join(text.split())
    if len(text) > _MAX_MESSAGE:
        text = text[: _MAX_MESSAGE - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _where(exc: BaseException, path: Path) -> str:
    """' (at model.py line 12: `code`)' for the deepest frame in the model file,
    plus where it was raised when that is another file in the model's folder."""
    path = path.resolve()
    folder = path.parent
    frames = [(Path(f.filename), f.lineno, f.line) for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        frames.append((Path(exc.filename), exc.lineno, (exc.text or "").strip()))

    def resolved(p: Path) -> Path:
        try:
            return p.resolve()
        except OSError:
            return p

    in_file = [f for f in frames if resolved(f[0]) == path]
    in_folder = [f for f in frames if resolved(f[0]).is_relative_to(folder) and is_user_file(resolved(f[0]))]
    parts = []
    if in_file:
        _, lineno, line = in_file[-1]
        parts.append(f"at {path.name} line {lineno}" + (f": `{line.strip()}`" if line else ""))
    if in_folder and in_folder[-1] not in in_file:
        file, lineno, line = in_folder[-1]
        parts.append(f"raised in {file.name} line {lineno}" + (f": `{line.strip()}`" if line else ""))
    return f" ({'; '.join(parts)})" if parts else ""


def _source_file_of(model: nn.Module) -> str | None:
    forward = getattr(type(model), "forward", None)
    code = getattr(forward, "__code__", None)
    if code is None or not is_user_file(code.co_filename):
        return None
    return code.co_filename
