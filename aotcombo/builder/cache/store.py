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
source of ``compile/triton_job.py``. The entry holds the cubin, the PTX and the launch
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
  of aotcombo's trace stage (``TRACE_SOURCES``: Inductor's bridge, the graph rewrites
  before it, the graph's classes);
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

import functools
import hashlib
import inspect
import io
import json
import os
import pickle
import struct
import tempfile
from pathlib import Path
from typing import Any

from ... import __version__
from ..inputs.environment import tool_versions
from .fingerprint import Fingerprint, file_digest, tensor_spec, torch_state

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


BUILDER = Path(__file__).resolve().parents[1]
# The trace stage's code, relative to the builder: every module of trace/, every module of kernels/
# (the rewrites of ours it runs before Inductor, the recipes and rules they ask, and the op
# definitions: a rewrite the list missed would leave a stale trace in the cache), the
# tensor-parallel split of the model it traces, and the graph it writes.
TRACE_SOURCES = tuple(str(p.relative_to(BUILDER)) for p in (*sorted((BUILDER / "trace").glob("*.py")),
                                                             *sorted((BUILDER / "kernels").rglob("*.py"))))
TRACE_SOURCES += ("parallel/shard.py", "graph.py")


@functools.cache
def _own_source_digest(*modules: str) -> str:
    """aotcombo's own sources, once per process: the code running is the code loaded."""
    return _digest([(m, file_digest(str(BUILDER / m))) for m in modules])


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

    def may_have_trace(self, key: str) -> bool:
        """Whether a trace entry exists under ``key`` (not read: ``get_trace`` judges it)."""
        return self.root is not None and self._path("traces", key, ".pkl").exists()

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
        if module == "aotcombo.builder.graph":
            from .. import graph

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
        _own_source_digest("compile/triton_job.py"),
        _triton_facts(arch),
        {"source": source, "name": name, "signature": list(signature.items()), "aligned": list(aligned),
         "arch": arch, "options": options},
    )


def trace_key(model, inputs, arch: int, model_file: str | Path | None = None) -> str:
    """The trace cache key of ``model`` on ``inputs`` for ``sm_{arch}``;
    raises ``Uncacheable`` when it cannot be computed exactly."""
    return trace_keys(model, inputs, [arch], model_file)[arch]


def trace_keys(model, inputs, archs, model_file: str | Path | None = None, extra=None) -> dict[int, str]:
    """``trace_key`` for several archs (the model is fingerprinted once); ``extra``: more
    plain data the trace depends on (a dynamic batch)."""
    fp = Fingerprint()
    model_part = fp.model(model)
    if model_file is not None:
        fp.add_file(str(Path(model_file).resolve()))
    base = _digest(
        "trace",
        FORMAT,
        __version__,
        _own_source_digest(*TRACE_SOURCES),
        tool_versions(),
        [tensor_spec(t) for t in inputs],
        _binding(model),
        model_part,
        sorted(fp.files.items()),
        torch_state(),
        extra,
    )
    return {arch: _digest(base, arch) for arch in archs}


def _binding(model) -> str:
    """How the inputs bind to ``model``'s forward: its signature (example inputs given by name make
    a forward of their keys in their order, ``inputs/keywords.py``, in no file the key reads)."""
    try:
        return str(inspect.signature(model.forward))
    except (TypeError, ValueError):
        return ""
