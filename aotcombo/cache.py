"""The build cache: compiled kernels and traces, content addressed, shared by builds.

Where: ``$AOTCOMBO_CACHE_DIR``, else ``$XDG_CACHE_HOME/aotcombo``, else
``~/.cache/aotcombo``. ``--no-cache`` (or ``AOTCOMBO_NO_CACHE=1``) neither reads
nor writes it; ``aotcombo cache --clear`` empties it. Every entry is one file,
written to a temporary name in its folder and renamed into place
(``os.replace``), so concurrent builds never see half an entry; an entry that
cannot be read (truncated, another format, corrupt) is a miss, never an error;
a cache folder that cannot be written is a warning, never an error.

Kernels (``kernels/``): the key hashes everything ``triton.compile`` sees: the
rendered kernel module, the function name, its signature and 16-byte aligned
parameters, the arch, warps and stages, the Triton version, ptxas' version,
Triton's cache-invalidating environment variables, aotcombo's version and the
source of ``compiler.py``. The entry holds the cubin, the PTX and the launch
metadata (warps, shared memory, scratch sizes, registers, local memory).

Traces (``traces/``): tracing (torch.export + Inductor) is 3-10 s per arch and
dominates a rebuild, so its result (``graph.Graph``, plain frozen dataclasses)
is cached too, under a key that must change whenever the trace could:

* the model: every module's class (with the *contents* of every source file of
  user code it reaches: classes, functions and modules referenced from their
  globals, closures and defaults, transitively), its non-tensor attributes
  (encoded exactly; a value that cannot be encoded exactly disables the trace
  cache for that build), the names, shapes, strides, dtypes and requires_grad
  of its parameters and buffers, tensor attributes with their values, hooks;
* the model file's contents, when built from a file (``aotcombo build``);
* the example inputs' shapes, strides, dtypes and storage offsets;
* the arch; torch's, triton's, Python's and aotcombo's versions and the source
  of aotcombo's trace stage (``inductor_bridge.py``, ``graph.py``);
* torch's global numerics flags, non-default settings of Inductor's, Dynamo's
  and functorch's configs (when imported) and the ``TORCH*``/``TORCHINDUCTOR_*``
  environment variables.

Weight *values* are not part of the key: the trace runs on fake tensors and
never sees them, and a cached trace takes the weights from the model being
built. On a hit, the cached graph's input and weight specs are checked against
the model's again. What the key cannot see is behaviour hidden outside Python
code and values (a model reading a data file or an environment variable to
decide its *code path*); ``--no-cache`` is the escape hatch, and the build
prints whether a trace came from the cache.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import io
import json
import os
import pickle
import struct
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from . import __version__

FORMAT = 1  # bump to orphan every entry written by an older layout
_KERNEL_MAGIC = b"AOTCOMBO-KERNEL\x01"


def default_dir() -> Path:
    """The cache folder this environment selects (it may not exist yet)."""
    explicit = os.environ.get("AOTCOMBO_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    return base / "aotcombo"


def disabled_by_env() -> bool:
    return os.environ.get("AOTCOMBO_NO_CACHE", "").strip().lower() in ("1", "true", "yes", "on")


def _digest(*parts: Any) -> str:
    """sha256 of a canonical JSON encoding of ``parts``."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _file_digest(path: str) -> str | None:
    """sha256 of a file's bytes, read every time: a long-lived process (a notebook,
    a test session) may edit a model file between two builds."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


@functools.cache
def _own_source_digest(*modules: str) -> str:
    """aotcombo's own sources, once per process: the code running is the code loaded."""
    here = Path(__file__).resolve().parent
    return _digest([(m, _file_digest(str(here / m))) for m in modules])


class Cache:
    """One cache folder. ``Cache(None)`` is the disabled cache: every get misses,
    every put is dropped."""

    def __init__(self, root: str | Path | None, warn=None):
        self.root = Path(root) if root is not None else None
        self._warn = warn
        self._warned = False
        self.hits = {"kernel": 0, "trace": 0}
        self.misses = {"kernel": 0, "trace": 0}

    @classmethod
    def from_options(cls, cache: "bool | str | Path | Cache | None", warn=None) -> "Cache":
        """``True``: the default folder (unless ``AOTCOMBO_NO_CACHE``); ``False``/``None``:
        disabled; a path: that folder; a ``Cache``: itself."""
        if isinstance(cache, Cache):
            return cache
        if cache is True:
            return cls(None if disabled_by_env() else default_dir(), warn)
        if cache is False or cache is None:
            return cls(None, warn)
        return cls(Path(cache).expanduser(), warn)

    @property
    def enabled(self) -> bool:
        return self.root is not None

    def _path(self, kind: str, key: str, suffix: str) -> Path:
        assert self.root is not None
        return self.root / f"v{FORMAT}" / kind / key[:2] / f"{key}{suffix}"

    # --- raw entries ------------------------------------------------------------

    def _read(self, kind: str, key: str, suffix: str) -> bytes | None:
        if self.root is None:
            return None
        try:
            return self._path(kind, key, suffix).read_bytes()
        except OSError:
            return None

    def _write(self, kind: str, key: str, suffix: str, data: bytes) -> None:
        if self.root is None:
            return
        path = self._path(kind, key, suffix)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            tmp = None
        except OSError as exc:
            if not self._warned and self._warn is not None:
                self._warned = True
                self._warn(
                    f"cannot write the build cache at {self.root} ({exc.strerror or exc}); building without "
                    "caching (set AOTCOMBO_CACHE_DIR to a writable folder, or pass --no-cache)"
                )
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def _drop(self, kind: str, key: str, suffix: str) -> None:
        if self.root is not None:
            try:
                self._path(kind, key, suffix).unlink()
            except OSError:
                pass

    # --- kernels -------------------------------------------------------------------

    def get_kernel(self, key: str) -> dict | None:
        data = self._read("kernels", key, ".bin")
        entry = _decode_kernel(data) if data is not None else None
        if data is not None and entry is None:
            self._drop("kernels", key, ".bin")
        if entry is None:
            self.misses["kernel"] += 1
        else:
            self.hits["kernel"] += 1
        return entry

    def put_kernel(self, key: str, entry: dict) -> None:
        self._write("kernels", key, ".bin", _encode_kernel(entry))

    # --- traces ----------------------------------------------------------------------

    def get_trace(self, key: str) -> dict | None:
        data = self._read("traces", key, ".pkl")
        entry = None
        if data is not None:
            try:
                entry = _SafeUnpickler(io.BytesIO(data)).load()
                if not isinstance(entry, dict) or entry.get("key") != key:
                    entry = None
            except Exception:  # noqa: BLE001 - any unreadable entry is a miss
                entry = None
            if entry is None:
                self._drop("traces", key, ".pkl")
        if entry is None:
            self.misses["trace"] += 1
        else:
            self.hits["trace"] += 1
        return entry

    def put_trace(self, key: str, entry: dict) -> bool:
        try:
            data = pickle.dumps({**entry, "key": key}, protocol=4)
            _SafeUnpickler(io.BytesIO(data)).load()  # what cannot be read back is not written
        except Exception:  # noqa: BLE001
            return False
        self._write("traces", key, ".pkl", data)
        return True

    # --- housekeeping ----------------------------------------------------------------

    def usage(self) -> dict:
        """Entries and bytes per kind."""
        out = {}
        for kind in ("kernels", "traces"):
            n = size = 0
            if self.root is not None:
                for path in (self.root / f"v{FORMAT}" / kind).glob("*/*"):
                    if path.is_file() and not path.name.startswith("."):
                        n += 1
                        size += path.stat().st_size
            out[kind] = {"entries": n, "bytes": size}
        return out

    def clear(self) -> int:
        """Remove every entry (of every format); returns the bytes freed."""
        import shutil

        freed = 0
        if self.root is None or not self.root.is_dir():
            return 0
        for child in self.root.iterdir():
            if child.is_dir() and child.name.startswith("v") and child.name[1:].isdigit():
                freed += sum(p.stat().st_size for p in child.rglob("*") if p.is_file())
                shutil.rmtree(child, ignore_errors=True)
        return freed


# --- kernel entries: a header (JSON) and two blobs, checksummed ---------------------


def _encode_kernel(entry: dict) -> bytes:
    cubin: bytes = entry["cubin"]
    ptx: bytes = entry["ptx"].encode()
    meta = {k: v for k, v in entry.items() if k not in ("cubin", "ptx")}
    header = json.dumps(
        {"meta": meta, "cubin": len(cubin), "ptx": len(ptx), "sha256": hashlib.sha256(cubin + ptx).hexdigest()},
        sort_keys=True,
    ).encode()
    return _KERNEL_MAGIC + struct.pack("<Q", len(header)) + header + cubin + ptx


def _decode_kernel(data: bytes) -> dict | None:
    try:
        if not data.startswith(_KERNEL_MAGIC):
            return None
        at = len(_KERNEL_MAGIC)
        (n,) = struct.unpack_from("<Q", data, at)
        at += 8
        header = json.loads(data[at: at + n])
        at += n
        body = data[at:]
        if len(body) != header["cubin"] + header["ptx"] or hashlib.sha256(body).hexdigest() != header["sha256"]:
            return None
        cubin, ptx = body[: header["cubin"]], body[header["cubin"]:]
        return {**header["meta"], "cubin": cubin, "ptx": ptx.decode()}
    except (ValueError, KeyError, struct.error, UnicodeDecodeError, TypeError):
        return None


# --- trace entries: pickles of aotcombo.graph dataclasses and builtins only ----------

_SAFE_BUILTINS = {"tuple", "list", "dict", "set", "frozenset", "int", "float", "complex", "str", "bytes", "bool",
                  "slice", "range"}


class _SafeUnpickler(pickle.Unpickler):
    """Loads only aotcombo's plain-data graph classes and builtin containers."""

    def find_class(self, module, name):
        if module == "builtins" and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        if module == "aotcombo.graph":
            from . import graph

            value = getattr(graph, name, None)
            if isinstance(value, type) and hasattr(value, "__dataclass_fields__"):
                return value
        raise pickle.UnpicklingError(f"the build cache does not load {module}.{name}")


# --- keys --------------------------------------------------------------------------------


@functools.cache
def _triton_facts(arch: int) -> dict:
    import triton

    facts = {"triton": triton.__version__}
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars

        facts["env"] = sorted(get_cache_invalidating_env_vars().items())
    except Exception:  # noqa: BLE001 - older/newer Triton: fall back to the TRITON_* environment
        facts["env"] = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITON_") and "DIR" not in k)
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend

        facts["backend"] = make_backend(GPUTarget("cuda", arch, 32)).hash()  # ptxas version and arch
    except Exception:  # noqa: BLE001 - the compile itself will report a broken toolchain
        facts["backend"] = None
    return facts


def kernel_key(source: str, name: str, signature: dict, aligned: list, arch: int, options: dict) -> str:
    return _digest(
        "kernel",
        FORMAT,
        __version__,
        _own_source_digest("compiler.py"),
        _triton_facts(arch),
        {"source": source, "name": name, "signature": list(signature.items()), "aligned": list(aligned),
         "arch": arch, "options": options},
    )


class Uncacheable(Exception):
    """The model holds a value whose content cannot be fingerprinted exactly."""


def trace_key(model, inputs, arch: int, model_file: str | Path | None = None) -> str:
    """The trace cache key of ``model`` on ``inputs`` for ``sm_{arch}``;
    raises ``Uncacheable`` when it cannot be computed exactly."""
    return trace_keys(model, inputs, [arch], model_file)[arch]


def trace_keys(model, inputs, archs, model_file: str | Path | None = None, extra=None) -> dict[int, str]:
    """``trace_key`` for several archs (the model is fingerprinted once); ``extra``: more
    plain data the trace depends on (a dynamic batch)."""
    import torch

    fp = _Fingerprint()
    model_part = fp.model(model)
    if model_file is not None:
        fp.add_file(str(Path(model_file).resolve()))
    base = _digest(
        "trace",
        FORMAT,
        __version__,
        _own_source_digest("inductor_bridge.py", "graph.py"),
        {"torch": torch.__version__, "git": getattr(torch.version, "git_version", None),
         "cuda": torch.version.cuda, "python": sys.version, "platform": sys.platform},
        _triton_version(),
        [_tensor_spec(t) for t in inputs],
        model_part,
        sorted(fp.files.items()),
        _torch_state(),
        extra,
    )
    return {arch: _digest(base, arch) for arch in archs}


def _triton_version() -> str | None:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return None


def _tensor_spec(t) -> list:
    return [list(t.shape), list(t.stride()), str(t.dtype), int(t.storage_offset()), bool(t.requires_grad),
            t.device.type, t.layout.__repr__(), bool(getattr(t, "is_quantized", False))]


def _torch_state() -> list:
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
    # A config module that is not imported yet has its defaults (and the
    # environment, above); importing Inductor's just to read it costs 1 s.
    from .inductor_bridge import TRACE_CONFIG_MODULES

    for name in TRACE_CONFIG_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            changed = _config_changes(module, name)
            if changed:
                state.append((name, _Fingerprint().value(changed, "config")))
    return state


def _config_changes(module, name: str) -> dict:
    """The settings of a torch config module whose value is not the default.

    Compared by value, not by torch's notion of "set": after a ``config.patch``
    is undone (as every trace does) settings hold their defaults again but count
    as set, which would make a process that has traced key differently from a
    fresh one."""
    try:
        current = module._get_dict()
        defaults = {key: entry.default for key, entry in module._config.items()}
    except Exception:  # noqa: BLE001 - an unknown config module: take every value
        try:
            return module.get_config_copy()
        except Exception:  # noqa: BLE001
            raise Uncacheable(f"cannot read {name}") from None
    changed = {}
    for key, value in current.items():
        try:
            same = key in defaults and bool(value == defaults[key])
        except Exception:  # noqa: BLE001
            same = False
        if not same:
            changed[key] = value
    return changed


class _Fingerprint:
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
            params = [(n, None if p is None else _tensor_spec(p)) for n, p in module._parameters.items()]
            buffers = [(n, None if b is None else _tensor_spec(b), n in module._non_persistent_buffers_set)
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
            if t.device.type != "cpu" or t.is_sparse or getattr(t, "is_quantized", False) or type(t) not in (
                    torch.Tensor, torch.nn.Parameter, torch.nn.Buffer if hasattr(torch.nn, "Buffer") else torch.Tensor):
                raise Uncacheable(f"{where} is a tensor aotcombo cannot fingerprint")
            data = t.contiguous().view(torch.uint8) if t.numel() and t.dim() else t.reshape(-1).contiguous()
            return ["tensor", _tensor_spec(value), hashlib.sha256(data.numpy().tobytes()).hexdigest()]
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
            return ["method", self.value(value.__func__, where, depth + 1), self.value(value.__self__, where, depth + 1)]
        if isinstance(value, types.FunctionType):
            return self.function(value, where, depth)
        if isinstance(value, type):
            return ["class", self.cls(value)]
        if isinstance(value, types.ModuleType):
            self._module_file(value)
            return ["module-object", value.__name__]
        if isinstance(value, (types.BuiltinFunctionType, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
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
        kind = _kind(code.co_filename)
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
            kind = _kind(file)
            if kind == "versioned":
                continue
            self.add_file(file)
            if kind != "user":
                continue
            for attr in vars(klass).values():
                fn = getattr(attr, "__func__", attr)
                if isinstance(fn, types.FunctionType) and _kind(fn.__code__.co_filename) == "user":
                    self.add_file(fn.__code__.co_filename)
                    self._scan_globals(fn.__globals__)
        file = _class_file(cls)
        owner = cls.__module__ if _kind(file) == "versioned" or not file or file.startswith("<") else file
        return [owner, cls.__qualname__]

    def add_file(self, path: str | None) -> None:
        """Fingerprint a source file by its contents (paths of files that are not there,
        such as ``<string>``, are skipped: their code is fingerprinted compiled)."""
        if not path or path in self.files or not os.path.isfile(path):
            return
        if len(self.files) >= self.MAX_FILES:
            raise Uncacheable("the model reaches too many source files")
        digest = _file_digest(path)
        if digest is None:
            raise Uncacheable(f"cannot read source file {path}")
        self.files[path] = digest

    def _module_file(self, module: types.ModuleType) -> None:
        file = getattr(module, "__file__", None)
        kind = _kind(file)
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
                if _kind(file) != "versioned":
                    self.add_file(file)
                    if _kind(file) == "user":
                        self._scan_globals(value.__globals__)
            elif isinstance(value, type):
                file = _class_file(value)
                if _kind(file) != "versioned" and file not in self.files:
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


@functools.cache
def _versioned_roots() -> tuple[str, ...]:
    """Folders whose code is pinned by a version in the key: Python's standard
    library, torch (and its bundled packages), triton and aotcombo."""
    import sysconfig

    roots = {os.path.dirname(os.path.abspath(__file__))}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(path)
    for name in ("torch", "triton", "torchgen", "functorch"):
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            roots.add(os.path.dirname(file))
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots))


@functools.cache
def _kind(file: str | None) -> str:
    """``versioned`` (stdlib, torch, triton, aotcombo: identified by name, covered by
    versions), ``third_party`` (other installed packages: their files are hashed,
    not followed) or ``user`` (hashed and followed through their globals)."""
    if not file:
        return "versioned"  # builtins and extension types have no Python source
    if file.startswith("<"):
        return "user"  # exec'd code: fingerprinted by its compiled code
    path = os.path.realpath(file)
    if path.startswith(_versioned_roots()):
        return "versioned"
    parts = path.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return "third_party"
    return "user"
