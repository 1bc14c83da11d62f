"""Fingerprints for the trace cache: exact, stable encodings of what a trace depends on.

``Fingerprint().model(model)`` encodes a model's structure (every module's class, its
non-tensor attributes, the specs of its parameters and buffers, tensor attributes with
their values, hooks) and collects, in ``files``, the contents of every source file of
user code it reaches (classes, functions and modules referenced from their globals,
closures and defaults, transitively). ``torch_state()`` encodes torch's global numerics
flags, the non-default settings of the trace's config modules and the ``TORCH*``
environment. A value that cannot be encoded exactly raises ``Uncacheable``: that build
then traces without the cache. ``cache.trace_keys`` puts the pieces together.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import os
import sys
import types

from ..inputs.usercode import code_kind
from ..trace.config import op_types


class Uncacheable(Exception):
    """The model holds a value whose content cannot be fingerprinted exactly."""


def file_digest(path: str) -> str | None:
    """sha256 of a file's bytes, read every time: a long-lived process (a notebook,
    a test session) may edit a model file between two builds."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def tensor_spec(t) -> list:
    return [list(t.shape), list(t.stride()), str(t.dtype), int(t.storage_offset()), bool(t.requires_grad),
            t.device.type, t.layout.__repr__(), bool(getattr(t, "is_quantized", False))]


def torch_state() -> list:
    import torch

    state: list = [
        ("default_dtype", str(torch.get_default_dtype())),
        ("matmul_precision", torch.get_float32_matmul_precision()),
        ("deterministic", torch.are_deterministic_algorithms_enabled()),
        ("grad", torch.is_grad_enabled()),
        ("env", sorted((k, v) for k, v in os.environ.items()
                       if k.startswith(("TORCH", "PYTORCH_")) and "CACHE_DIR" not in k)),
    ]
    try:
        state.append(("tf32", torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                      torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
                      torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction))
    except Exception:  # noqa: BLE001
        pass
    from ..trace.config import trace_config_changes

    for name, changed in trace_config_changes().items():
        if changed is None:
            raise Uncacheable(f"cannot read {name}")
        state.append((name, Fingerprint().value(changed, "config")))
    return state


class Fingerprint:
    """Exact, stable encodings of a model's structure and of the user code it runs."""

    MAX_DEPTH = 12
    MAX_FILES = 400

    def __init__(self):
        self.files: dict[str, str] = {}  # path -> sha256 of its contents (user code only)
        self._scanned_globals: set[int] = set()
        self._active: set[int] = set()

    # --- the model --------------------------------------------------------------------

    def model(self, model) -> list:
        import torch

        out = []
        for qual, module in model.named_modules(remove_duplicate=False):
            params = [(n, None if p is None else tensor_spec(p)) for n, p in module._parameters.items()]
            buffers = [(n, None if b is None else tensor_spec(b), n in module._non_persistent_buffers_set)
                       for n, b in module._buffers.items()]
            attrs = []
            for key, value in sorted(vars(module).items()):
                if key in _MODULE_INTERNALS:
                    continue
                if key.startswith("_") and key.endswith("hooks") or key in _HOOK_ATTRS:
                    attrs.append((key, self.value(dict(value) if isinstance(value, dict) else value, key)))
                    continue
                attrs.append((key, self.value(value, f"{qual or 'model'}.{key}")))
            out.append((qual, self.cls(type(module)), module.training, params, buffers, attrs,
                        sorted(module._modules)))
        # Global hooks on every nn.Module (torch.nn.modules.module.register_module_forward_hook & co.).
        import torch.nn.modules.module as mm

        global_hooks = [self.value(dict(getattr(mm, n, {})), n) for n in
                        ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_module_registration_hooks")]
        out.append(("<global hooks>", global_hooks))
        del torch
        return out

    # --- values -------------------------------------------------------------------------

    def value(self, value, where: str, depth: int = 0):
        """An exact encoding of ``value``; ``Uncacheable`` when there is none."""
        import torch

        if depth > self.MAX_DEPTH:
            raise Uncacheable(f"{where} nests too deep")
        if value is None or isinstance(value, (bool, int, str, bytes)) and type(value) in (bool, int, str, bytes):
            return [type(value).__name__, value if not isinstance(value, bytes) else value.hex()]
        if type(value) is float:
            return ["float", value.hex()]
        if type(value) is complex:
            return ["complex", value.real.hex(), value.imag.hex()]
        if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return [type(value).__name__, str(value)]
        if isinstance(value, torch.Size):
            return ["Size", list(value)]
        if isinstance(value, torch.Tensor):
            t = value.detach()
            if t.device.type == "meta" and type(t) in (torch.Tensor, torch.nn.Parameter):
                return ["meta-tensor", tensor_spec(value)]  # no values: its spec is all of it
            if t.device.type != "cpu" or t.is_sparse or getattr(t, "is_quantized", False) or type(t) not in (
                    torch.Tensor, torch.nn.Parameter, torch.nn.Buffer if hasattr(torch.nn, "Buffer") else torch.Tensor):
                raise Uncacheable(f"{where} is a tensor aotcombo cannot fingerprint")
            data = t.contiguous().view(torch.uint8) if t.numel() and t.dim() else t.reshape(-1).contiguous()
            return ["tensor", tensor_spec(value), hashlib.sha256(data.numpy().tobytes()).hexdigest()]
        if isinstance(value, enum.Enum):
            return ["enum", self.cls(type(value)), value.name]
        key = id(value)
        if key in self._active:
            return ["cycle"]
        self._active.add(key)
        try:
            return self._composite(value, where, depth)
        finally:
            self._active.discard(key)

    def _composite(self, value, where: str, depth: int):
        import torch

        if type(value) in (tuple, list):
            return [type(value).__name__, [self.value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]]
        if type(value) in (set, frozenset):
            items = [self.value(v, f"{where}{{}}", depth + 1) for v in value]
            return [type(value).__name__, sorted(items, key=lambda e: json.dumps(e, sort_keys=True, default=repr))]
        if isinstance(value, dict) and type(value).__module__ in ("builtins", "collections"):
            items = [[self.value(k, f"{where} key", depth + 1), self.value(v, f"{where}[{k!r}]", depth + 1)]
                     for k, v in value.items()]
            return [type(value).__name__, items]  # insertion order can matter (kwargs, hook order)
        if isinstance(value, torch.nn.Module):
            # Not a registered submodule (a module in a plain list, or a global): all of it.
            return ["module", self.model(value)]
        if isinstance(value, functools.partial):
            return ["partial", self.value(value.func, where, depth + 1), self.value(value.args, where, depth + 1),
                    self.value(value.keywords, where, depth + 1)]
        if isinstance(value, types.MethodType):
            return ["method", self.value(value.__func__, where, depth + 1),
                    self.value(value.__self__, where, depth + 1)]
        if isinstance(value, types.FunctionType):
            return self.function(value, where, depth)
        if isinstance(value, type):
            return ["class", self.cls(value)]
        if isinstance(value, types.ModuleType):
            self._module_file(value)
            return ["module-object", value.__name__]
        if isinstance(value, (types.BuiltinFunctionType, *op_types())):
            return ["builtin", getattr(value, "__module__", None), getattr(value, "__qualname__", None) or str(value)]
        if _is_numpy_array(value):
            return ["ndarray", str(value.dtype), list(value.shape),
                    hashlib.sha256(value.tobytes() if value.dtype != object else b"").hexdigest()] \
                if value.dtype != object else _raise(Uncacheable(f"{where} is an object array"))
        if type(value).__module__ == "numpy" and hasattr(value, "item") and not hasattr(value, "__dict__"):
            return ["numpy-scalar", type(value).__name__, self.value(value.item(), where, depth + 1)]
        # Plain objects (dataclasses, config objects): their class and their state.
        cls = type(value)
        state = None
        if hasattr(value, "__dict__"):
            state = vars(value)
        slots = [s for c in cls.__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
        if state is None and not slots:
            raise Uncacheable(f"{where} is a {cls.__module__}.{cls.__qualname__} aotcombo cannot fingerprint")
        encoded_state = [[k, self.value(v, f"{where}.{k}", depth + 1)] for k, v in sorted((state or {}).items())]
        encoded_slots = [[s, self.value(getattr(value, s, None), f"{where}.{s}", depth + 1)] for s in slots
                         if s not in ("__dict__", "__weakref__")]
        return ["object", self.cls(cls), encoded_state, encoded_slots]

    def function(self, fn: types.FunctionType, where: str, depth: int):
        code = fn.__code__
        kind = code_kind(code.co_filename)
        # User code is named by its file, not its module: a model file gets a new
        # module name each time it is loaded.
        owner = fn.__module__ if kind == "versioned" or code.co_filename.startswith("<") else code.co_filename
        entry = ["function", owner, fn.__qualname__, code.co_firstlineno]
        if kind == "versioned":
            return entry
        self.add_file(code.co_filename)
        entry.append(_code_digest(code))
        if fn.__defaults__:
            entry.append(self.value(fn.__defaults__, f"{where} defaults", depth + 1))
        if fn.__kwdefaults__:
            entry.append(self.value(fn.__kwdefaults__, f"{where} defaults", depth + 1))
        if fn.__closure__:
            cells = []
            for name, cell in zip(code.co_freevars, fn.__closure__):
                try:
                    contents = cell.cell_contents
                except ValueError:
                    cells.append([name, "<empty>"])
                    continue
                cells.append([name, self.value(contents, f"{where} closure {name}", depth + 1)])
            entry.append(cells)
        if kind == "user":
            self._scan_globals(fn.__globals__)
        return entry

    def cls(self, cls: type) -> list:
        """A class: its name, and unless torch's or the stdlib's, the files of its MRO and what they reach."""
        for klass in cls.__mro__:
            if klass is object:
                continue
            file = _class_file(klass)
            kind = code_kind(file)
            if kind == "versioned":
                continue
            self.add_file(file)
            if kind != "user":
                continue
            for attr in vars(klass).values():
                fn = getattr(attr, "__func__", attr)
                if isinstance(fn, types.FunctionType) and code_kind(fn.__code__.co_filename) == "user":
                    self.add_file(fn.__code__.co_filename)
                    self._scan_globals(fn.__globals__)
        file = _class_file(cls)
        owner = cls.__module__ if code_kind(file) == "versioned" or not file or file.startswith("<") else file
        return [owner, cls.__qualname__]

    def add_file(self, path: str | None) -> None:
        """Fingerprint a source file by its contents (paths of files that are not there,
        such as ``<string>``, are skipped: their code is fingerprinted compiled)."""
        if not path or path in self.files or not os.path.isfile(path):
            return
        if len(self.files) >= self.MAX_FILES:
            raise Uncacheable("the model reaches too many source files")
        digest = file_digest(path)
        if digest is None:
            raise Uncacheable(f"cannot read source file {path}")
        self.files[path] = digest

    def _module_file(self, module: types.ModuleType) -> None:
        file = getattr(module, "__file__", None)
        kind = code_kind(file)
        if kind == "versioned":
            return
        self.add_file(file)
        if kind == "user":
            self._scan_globals(vars(module))

    def _scan_globals(self, namespace: dict) -> None:
        """User code a function can reach through its module's globals, transitively."""
        if id(namespace) in self._scanned_globals:
            return
        self._scanned_globals.add(id(namespace))
        for value in list(namespace.values()):
            if isinstance(value, types.ModuleType):
                self._module_file(value)
            elif isinstance(value, types.FunctionType):
                file = value.__code__.co_filename
                if code_kind(file) != "versioned":
                    self.add_file(file)
                    if code_kind(file) == "user":
                        self._scan_globals(value.__globals__)
            elif isinstance(value, type):
                file = _class_file(value)
                if code_kind(file) != "versioned" and file not in self.files:
                    self.cls(value)


_MODULE_INTERNALS = {"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "training",
                     "_is_full_backward_hook", "_state_dict_pre_hooks", "_state_dict_hooks",
                     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"}
_HOOK_ATTRS = {"_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks_with_kwargs"}


def _raise(exc):
    raise exc


def _is_numpy_array(value) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.ndarray)


def _code_digest(code: types.CodeType) -> str:
    """The compiled code itself (covers a function built by exec/compile, whose file says nothing)."""
    h = hashlib.sha256()

    def visit(c):
        h.update(c.co_code)
        h.update(repr(c.co_names).encode())
        h.update(repr(c.co_varnames).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                visit(const)
            else:
                h.update(repr((type(const).__name__, const)).encode())

    visit(code)
    return h.hexdigest()


def _class_file(cls: type) -> str | None:
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if file is not None:
        return file
    # Its module was dropped from sys.modules (model files are): ask its methods.
    for attr in vars(cls).values():
        fn = getattr(attr, "__func__", attr)
        if isinstance(fn, types.FunctionType):
            return fn.__code__.co_filename
    return None
