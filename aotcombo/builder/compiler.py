"""Compile rendered combo kernels to cubin (and PTX) for target archs, with no GPU.

Triton compiles for any ``GPUTarget`` without a device: we load the rendered
module under a *virtual* file name (its source is registered with
``linecache``, which is where Triton's ``inspect`` calls read it), wrap the
combo kernel in an ``ASTSource`` with its pointer signature and the 16-byte
alignment Inductor proved, and keep the binary and the launch facts the
runtime needs, plus the registers and local memory ``cuobjdump`` reports.

Reproducible: no temporary path reaches a binary (virtual file names, no line
info: line tables would also carry the path of Triton's own sources), and
Triton's cache is pointed at the build's temporary folder, so what comes out
depends only on the inputs of ``cache.kernel_key``.

Parallel: ``Scheduler`` compiles cache misses in a ``concurrent.futures`` process
pool (``forkserver`` with torch and triton preloaded, or ``spawn`` with
``AOTCOMBO_POOL=spawn``; ``fork`` is not offered: a child forked from a process
that has run Inductor deadlocked on a lock it inherited), started while the
next arch is traced.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import linecache
import os
import re
import subprocess
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError, CompileError, OutputError

NUM_STAGES = 1  # pointwise and reduction kernels have no loads worth pipelining (matmuls set theirs)
LINE_INFO = False  # line tables would put file paths into every binary


@dataclass(frozen=True)
class Binary:
    """One kernel compiled for one arch."""

    name: str  # the kernel function's symbol
    arch: int
    cubin: bytes
    ptx: str
    num_warps: int
    shared: int
    global_scratch: tuple[int, int]
    profile_scratch: tuple[int, int]
    registers: int | None = None  # per thread, from cuobjdump (None: not known)
    spills: int | None = None  # bytes of local memory per thread (register spills, local arrays)
    stack: int | None = None  # bytes of stack per thread
    pdl: bool = False  # it waits for the kernel before it (griddepcontrol): launch it early

    def to_entry(self) -> dict:
        entry = dataclasses.asdict(self)
        entry["global_scratch"] = list(self.global_scratch)
        entry["profile_scratch"] = list(self.profile_scratch)
        return entry

    @classmethod
    def from_entry(cls, entry: dict) -> "Binary":
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in entry.items() if k in fields}
        values["global_scratch"] = tuple(values["global_scratch"])
        values["profile_scratch"] = tuple(values["profile_scratch"])
        return cls(**values)


@dataclass(frozen=True)
class Job:
    """One kernel to compile for one arch."""

    label: str  # "sm_80/combo_3": for messages and progress
    source: str
    name: str
    signature: tuple[tuple[str, str], ...]
    aligned: tuple[str, ...]
    arch: int
    num_warps: int
    num_stages: int = NUM_STAGES

    @property
    def options(self) -> dict:
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, "line_info": LINE_INFO}

    def key(self) -> str:
        from .cache import kernel_key

        return kernel_key(self.source, self.name, dict(self.signature), list(self.aligned), self.arch, self.options)


# --- one kernel ------------------------------------------------------------------------


def _load_module(source: str, label: str):
    """Execute ``source`` as a module whose file is virtual: ``<aotcombo:label.py>``."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = f"<aotcombo:{label}.py>"
    name = f"aotcombo_kernels_{digest}"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module  # Triton resolves globals through the module
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    except BaseException:
        _unload(name, filename)
        raise
    return module, name, filename


def _unload(name: str, filename: str) -> None:
    sys.modules.pop(name, None)
    linecache.cache.pop(filename, None)


def _keep_failed_source(job: Job) -> Path | None:
    """The source of a kernel that failed, somewhere that outlives the build."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="aotcombo-failed-"))
        path = folder / f"{job.label.replace('/', '_')}.py"
        path.write_text(job.source)
        return path
    except OSError:
        return None


def run_job(job: Job, triton_cache_dir: str | None = None) -> Binary:
    """Compile ``job`` here; raises ``CompileError`` (or ``OutputError`` for a full disk)."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:  # pragma: no cover - check_environment catches this first
        raise CompileError(f"cannot import triton: {exc}", fix="pip install 'triton==3.8.*'") from exc

    name = filename = None
    try:
        module, name, filename = _load_module(job.source, job.label)
        fn = getattr(module, job.name)
        params = [p for p, _ in job.signature]
        attrs = {(params.index(p),): [["tt.divisibility", 16]] for p in job.aligned}
        src = ASTSource(fn=fn, signature=dict(job.signature), constexprs={}, attrs=attrs)
        with _triton_settings(triton, triton_cache_dir):
            compiled = triton.compile(
                src,
                target=GPUTarget("cuda", job.arch, 32),
                options={"num_warps": job.num_warps, "num_stages": job.num_stages},
            )
    except BuildError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise OutputError(
                f"no space left on device while compiling {job.label} (temporary files go to {tempfile.gettempdir()})",
                fix="free disk space, or point TMPDIR at a disk that has some",
            ) from exc
        raise _compile_error(job, exc) from exc
    except Exception as exc:  # noqa: BLE001 - any Triton failure is a compile error of this kernel
        raise _compile_error(job, exc) from exc
    finally:
        if name is not None:
            _unload(name, filename)
    meta = compiled.metadata
    cubin = compiled.asm["cubin"]
    usage = resource_usage(cubin, meta.name)
    return Binary(
        name=meta.name,
        arch=job.arch,
        cubin=cubin,
        ptx=compiled.asm["ptx"],
        num_warps=meta.num_warps,
        shared=meta.shared,
        global_scratch=(meta.global_scratch_size, meta.global_scratch_align),
        profile_scratch=(meta.profile_scratch_size, meta.profile_scratch_align),
        registers=usage.get("registers"),
        spills=usage.get("local"),
        stack=usage.get("stack"),
        pdl="griddepcontrol.wait" in compiled.asm["ptx"],
    )


class _triton_settings:
    """No line info, and Triton's own cache in a folder of ours (restored after)."""

    def __init__(self, triton, cache_dir: str | None):
        self.knobs = triton.knobs
        self.cache_dir = cache_dir

    def __enter__(self):
        self.scopes = [self.knobs.compilation.scope()]
        if self.cache_dir is not None:
            self.scopes.append(self.knobs.cache.scope())
        for scope in self.scopes:
            scope.__enter__()
        self.knobs.compilation.disable_line_info = not LINE_INFO
        if self.cache_dir is not None:
            self.knobs.cache.dir = self.cache_dir
        return self

    def __exit__(self, *exc):
        for scope in reversed(self.scopes):
            scope.__exit__(*exc)
        return False


def _compile_error(job: Job, exc: BaseException) -> CompileError:
    lines = str(exc).strip().splitlines()
    detail = "\n".join(lines[:12])
    kept = _keep_failed_source(job)
    where = f"the kernel source is saved at {kept}" if kept else "rerun with --verbose for the traceback"
    error = CompileError(
        f"Triton could not compile {job.name} for sm_{job.arch} ({job.label}): {type(exc).__name__}: {detail}",
        fix=f"{where}; report it with that file (it is generated from the model by aotcombo)",
    )
    error.detail = "".join(traceback.format_exception(exc))
    return error


# --- registers and local memory: cuobjdump ----------------------------------------------

_USAGE = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def _cuobjdump() -> str | None:
    try:
        import triton

        try:
            path = triton.knobs.nvidia.cuobjdump.path
        except Exception:  # noqa: BLE001 - knob missing or tool not runnable: look next to ptxas
            path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        return path if path and os.access(path, os.X_OK) else None
    except ImportError:
        return None


def resource_usage(cubin: bytes, function: str) -> dict:
    """``{"registers", "stack", "shared", "local"}`` of ``function`` in ``cubin`` per
    ``cuobjdump --dump-resource-usage`` (Triton ships it); ``{}`` when unavailable."""
    tool = _cuobjdump()
    if tool is None:
        return {}
    path = None
    try:
        fd, path = tempfile.mkstemp(suffix=".cubin")
        with os.fdopen(fd, "wb") as f:
            f.write(cubin)
        out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {}
    finally:
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass
    for match in _USAGE.finditer(out.stdout):
        if match.group(1) == function:
            registers, stack, shared, local = (int(match.group(i)) for i in range(2, 6))
            return {"registers": registers, "stack": stack, "shared": shared, "local": local}
    return {}


# --- many kernels: the build cache, then a process pool ---------------------------------

POOL_METHODS = ("forkserver", "spawn")  # not "fork": a child forked from a process that has run Inductor deadlocked on a lock it inherited
POOL_THRESHOLD_S = 4.0  # estimated compile seconds that pay for starting workers (~3.5 s of CPU to import torch and triton)
MAX_WORKERS = 8  # each worker holds torch and triton: ~0.7 GB


def estimated_seconds(job: Job) -> float:
    """Rough compile time of a job: ~0.12 s per jit function in its module (the
    combo and its sub-kernels), measured on the sample models on 2 cores."""
    return 0.12 * max(1, job.source.count("@triton.jit"))


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _worker_init() -> None:
    import multiprocessing
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    # Not concurrent.futures' job: the workers of a main process that ended abruptly
    # (kill -9, a crash, the CLI's os._exit) stay blocked for good, one reading the
    # job queue whose write end every worker holds too, one writing a result nobody
    # reads, and keep the forkserver alive. Each leaves when its parent has gone.
    sentinel = multiprocessing.parent_process().sentinel
    threading.Thread(target=_leave_with, args=(sentinel,), name="aotcombo-leave-with-main", daemon=True).start()


def _leave_with(sentinel) -> None:
    import multiprocessing.connection

    multiprocessing.connection.wait([sentinel])  # readable once the main process has ended
    os._exit(0)


def _run_in_worker(job: Job, triton_cache_dir: str | None) -> Binary:
    try:
        return run_job(job, triton_cache_dir)
    except BuildError:
        raise
    except Exception as exc:  # noqa: BLE001 - send back something picklable that says what happened
        raise _compile_error(job, exc) from None


class Scheduler:
    """Compile jobs through the build cache and, when they are worth it, a process pool.

    ``add()`` resolves cache hits at once and queues misses. ``plan_pool()``, called
    after each arch is traced, starts ``parallel`` workers if the compiles ahead pay
    for them; from then on each miss goes to them as it is added, so compiles overlap
    the tracing of the next arch. ``finish()`` waits for them, and compiles here what
    has no worker (``parallel`` 1, a small build, a broken pool).

    The main process compiles nothing while there are workers: having it take jobs
    too (while the workers start, where no trace hides that) saved ~1 s, within
    noise, on a one-arch build of ``sample_models/adam_step.py`` on 2 cores.
    """

    def __init__(self, cache, parallel: int, reporter, triton_cache_dir: str | None, method: str | None = None):
        import threading

        self.cache = cache
        self.parallel = max(1, int(parallel))
        self.reporter = reporter
        self.triton_cache_dir = triton_cache_dir
        method = method or os.environ.get("AOTCOMBO_POOL", "forkserver")
        self.method = method if method in POOL_METHODS else "forkserver"
        self.pool = None
        self.starting = None  # the thread that starts the workers
        self.ready = False  # the workers have started: jobs go to them
        self.lock = threading.Lock()  # over the queue, which that thread empties once they have
        self.queue: list = []  # (job, cache key) not handed out
        self.futures: dict = {}  # future -> (job, cache key)
        self.results: dict[str, Binary] = {}  # label -> binary
        self.cached = 0
        self.compiled = 0
        self.total = 0  # jobs to compile (cache misses)

    def add(self, job: Job) -> None:
        key = job.key() if self.cache.enabled else None
        entry = self.cache.get_kernel(key) if key is not None else None
        if entry is not None:
            try:
                self.results[job.label] = Binary.from_entry(entry)
                self.cached += 1
                return
            except (KeyError, TypeError, ValueError):
                pass
        self.total += 1
        with self.lock:
            self.queue.append((job, key))
        self._submit()

    def plan_pool(self, archs_left: int = 0) -> None:
        """Start the workers when the compiles ahead are worth them. ``archs_left``:
        archs still to trace, whose jobs are expected to be like those queued so far."""
        if self.pool is not None or self.parallel < 2 or not self.queue:
            return
        archs = len({job.arch for job, _ in self.queue})
        ahead = sum(estimated_seconds(job) for job, _ in self.queue) * (1 + archs_left / archs)
        if len(self.queue) + archs_left >= 2 and ahead >= POOL_THRESHOLD_S:
            self.reporter.detail(f"about {ahead:.0f} s of kernel compiles ahead")
            self.start_pool()

    def start_pool(self) -> None:
        """Start the workers, in a thread: the first submit waits for the forkserver
        to import torch and triton, seconds this process spends tracing instead."""
        import concurrent.futures
        import multiprocessing
        import threading

        if self.pool is not None or self.parallel < 2:
            return
        workers = min(self.parallel, MAX_WORKERS)
        try:
            ctx = multiprocessing.get_context(self.method)
            if self.method == "forkserver":
                from .inductor import KERNEL_RUNTIME_MODULE

                ctx.set_forkserver_preload([__name__, "triton", KERNEL_RUNTIME_MODULE])
            self.pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init)
        except Exception as exc:  # noqa: BLE001 - no pool: compile in this process
            self._no_pool(exc)
            return
        self.reporter.detail(f"starting {workers} compile worker(s) ({self.method})")
        self.starting = threading.Thread(target=self._start, args=(self.pool,), name="aotcombo-pool-start", daemon=True)
        self.starting.start()

    def _start(self, pool) -> None:
        try:
            pool.submit(os.getpid)  # returns once a worker exists
        except Exception as exc:  # noqa: BLE001 - no forkserver, no workers: this process compiles
            self._no_pool(exc)
            return
        self.ready = True
        self._submit()  # what was queued meanwhile

    def _submit(self) -> None:
        with self.lock:
            while self.ready and self.pool is not None and self.queue:
                job, key = self.queue[0]
                try:
                    future = self.pool.submit(_run_in_worker, job, self.triton_cache_dir)
                except Exception as exc:  # noqa: BLE001 - a broken pool: this process compiles
                    self._no_pool(exc)
                    return
                self.futures[future] = self.queue.pop(0)

    def _no_pool(self, exc: BaseException) -> None:
        self.reporter.detail(f"no compile workers ({type(exc).__name__}: {exc}); compiling here")
        self.parallel = 1  # and no second try
        self.close()

    def finish(self) -> dict[str, Binary]:
        """Compile what is pending; returns every binary by job label."""
        import concurrent.futures

        try:
            if self.starting is not None:
                self.starting.join()  # then every job queued is in self.futures, or the pool broke
            # In order, not as_completed(): that never returns a future cancelled by shutdown().
            for future, (job, key) in list(self.futures.items()):
                try:
                    binary = future.result()
                except (concurrent.futures.process.BrokenProcessPool, concurrent.futures.CancelledError) as exc:
                    self.queue.append((job, key))  # this process compiles it
                    if self.pool is not None:
                        self._no_pool(exc)
                    continue
                self._store(job, key, binary)
            while self.queue:
                job, key = self.queue.pop(0)
                self._store(job, key, run_job(job, self.triton_cache_dir))
        finally:
            self.close()
        return self.results

    def close(self) -> None:
        """Stop the workers; returns at once (a worker busy with a job nobody waits
        for any more ends after it)."""
        import threading

        pool, self.pool = self.pool, None
        if pool is not None:  # shutdown() would wait for a pool still starting: not here
            threading.Thread(target=pool.shutdown, kwargs={"wait": False, "cancel_futures": True},
                             name="aotcombo-pool-stop", daemon=True).start()

    def _store(self, job: Job, key: str | None, binary: Binary) -> None:
        self.results[job.label] = binary
        self.compiled += 1
        self.reporter.count("compiled kernels", self.compiled, self.total)
        if key is not None:
            self.cache.put_kernel(key, binary.to_entry())
