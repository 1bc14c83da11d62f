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

Parallel: ``Scheduler`` compiles cache misses in a process pool (``forkserver``
with torch and triton preloaded, or ``spawn`` with ``AOTCOMBO_POOL=spawn``;
``fork`` is not offered: a child forked from a process that has run Inductor
deadlocked on a lock it inherited) while the main process, which has
everything imported already, takes jobs from the other end of the queue.
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

from .errors import BuildError, CompileError, OutputError

NUM_STAGES = 1  # pointwise and reduction kernels have no loads worth pipelining
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

    @property
    def options(self) -> dict:
        return {"num_warps": self.num_warps, "num_stages": NUM_STAGES, "line_info": LINE_INFO}

    def key(self) -> str:
        from .cache import kernel_key

        return kernel_key(self.source, self.name, dict(self.signature), list(self.aligned), self.arch, self.options)


def parse_arch(text: str) -> int:
    """``"sm_90"`` / ``"90"`` / ``"sm90"`` -> 90."""
    cleaned = text.strip().lower().removeprefix("sm_").removeprefix("sm")
    if not cleaned.isdigit() or len(cleaned) not in (2, 3):
        raise ValueError(f"unknown arch {text!r}: write it as sm_80, sm_90, ...")
    return int(cleaned)


def supported_archs() -> list[int]:
    """Archs Triton's NVIDIA backend here can target."""
    return [75, 80, 86, 87, 89, 90, 100, 103, 120]


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
                options={"num_warps": job.num_warps, "num_stages": NUM_STAGES},
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


def compile_kernel(
    source: str,
    name: str,
    signature: dict[str, str],
    aligned: list[str],
    arch: int,
    num_warps: int,
    workdir: Path | None = None,
) -> Binary:
    """Compile function ``name`` of module ``source`` for ``sm_{arch}``, here, uncached.

    ``workdir`` is accepted for compatibility and unused: sources are virtual."""
    job = Job(f"sm_{arch}/{name}", source, name, tuple(signature.items()), tuple(aligned), arch, num_warps)
    return run_job(job)


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


# --- many kernels: cache, pool, the main process stealing jobs ----------------------------


def _worker_init(main_pid: int) -> None:
    import signal
    import threading

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    # A worker outlives a main process that ends abruptly (Ctrl-C while workers
    # start, a crash, the CLI's fast exit) blocked on its job queue, and keeps
    # the forkserver alive with it: it watches the main process and leaves with it.
    threading.Thread(target=_watch_main, args=(main_pid,), name="aotcombo-watch-main", daemon=True).start()


def _watch_main(main_pid: int) -> None:
    import select
    import time

    try:
        fd = os.pidfd_open(main_pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        select.select([fd], [], [])  # readable when the main process has exited
        os._exit(0)
    while True:
        time.sleep(0.5)
        try:
            os.kill(main_pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except OSError:
            pass


def _warm_up() -> int:
    """Import what every job needs (a worker's first task, while the main process traces)."""
    import triton  # noqa: F401
    import triton.compiler  # noqa: F401
    import importlib

    from .inductor_bridge import KERNEL_RUNTIME_MODULE

    importlib.import_module(KERNEL_RUNTIME_MODULE)

    _cuobjdump()
    return os.getpid()


def _run_in_worker(job: Job, triton_cache_dir: str | None) -> Binary:
    try:
        return run_job(job, triton_cache_dir)
    except BuildError:
        raise
    except Exception as exc:  # noqa: BLE001 - send back something picklable that says what happened
        raise _compile_error(job, exc) from None


POOL_THRESHOLD_S = 4.0  # estimated compile seconds that pay for a worker process


def estimated_seconds(job: Job) -> float:
    """Rough compile time of a job: ~0.12 s per jit function in its module (the
    combo and its sub-kernels), measured on the sample models on 2 cores."""
    return 0.12 * max(1, job.source.count("@triton.jit"))


POOL_METHODS = ("forkserver", "spawn")  # "fork" deadlocks: a child of a process that has run Inductor inherits held locks


def _stop(pool, starter) -> None:
    if starter is not None:
        starter.join()  # the workers exist (or failed to) before we stop them
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:  # a worker busy with a job we no longer need
        try:
            process.terminate()
        except Exception:  # noqa: BLE001
            pass
    for process in processes:
        try:
            process.join(timeout=5)
        except Exception:  # noqa: BLE001
            pass


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Scheduler:
    """Compile jobs through the cache, a process pool and the main process.

    ``parallel`` is the number of kernels compiled at once, the main process
    included (1: no pool). After each arch is planned, ``plan_pool()`` starts
    workers if the compiles ahead are worth it (they start while the next arch
    is traced); ``add()`` hands a job to a worker as soon as one is up and idle.
    ``finish()`` has the main process compile from the back of the queue (short
    jobs) while workers take from the front (long ones), so a pool that is slow
    to start never holds the build up."""

    def __init__(self, cache, parallel: int, reporter, triton_cache_dir: str | None,
                 method: str | None = None, max_workers: int = 8):
        import collections

        self.cache = cache
        self.parallel = max(1, int(parallel))
        self.reporter = reporter
        self.triton_cache_dir = triton_cache_dir
        self.method = method or os.environ.get("AOTCOMBO_POOL", "forkserver")
        if self.method not in POOL_METHODS:
            self.method = "forkserver"
        self.workers = min(self.parallel - 1, max_workers)
        self.pool = None
        self._starter = None
        self.results: dict[str, Binary] = {}  # label -> binary
        self.queue = collections.deque()  # (job, cache key) not handed out yet
        self.futures: dict = {}  # future -> (job, cache key)
        self.cached = 0
        self.compiled = 0
        self.total = 0  # jobs to compile (cache misses)

    # --- the pool ------------------------------------------------------------------

    def start_pool(self) -> None:
        """Create the pool; its worker processes start in the background (starting a
        forkserver waits for it to import torch and triton: seconds the main
        process spends tracing instead)."""
        if self.pool is not None or self.workers < 1:
            return
        import concurrent.futures
        import multiprocessing
        import threading

        try:
            ctx = multiprocessing.get_context(self.method)
            if self.method == "forkserver":
                from .inductor_bridge import KERNEL_RUNTIME_MODULE

                ctx.set_forkserver_preload(["aotcombo.compiler", "triton", KERNEL_RUNTIME_MODULE])
            self.pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
            )
        except Exception as exc:  # noqa: BLE001 - no pool: compile in this process
            self._no_pool(exc)
            return
        pool = self.pool

        def warm_up():
            try:
                for _ in range(self.workers):
                    pool.submit(_warm_up)
            except Exception as exc:  # noqa: BLE001 - the pool is broken or shut down: compile here
                self._no_pool(exc)

        self._starter = threading.Thread(target=warm_up, name="aotcombo-pool-start", daemon=True)
        self._starter.start()
        self.reporter.detail(f"starting {self.workers} compile worker(s) ({self.method})")

    def _no_pool(self, exc: BaseException) -> None:
        if self.workers:
            self.reporter.detail(f"no compile workers ({type(exc).__name__}: {exc}); compiling here")
        self.workers = 0

    def _pool_ready(self) -> bool:
        return (self.pool is not None and self.workers >= 1
                and (self._starter is None or not self._starter.is_alive()))

    def close(self, kill: bool = False) -> None:
        """Stop the workers. Returns at once: a pool still starting (a forkserver
        importing torch) is stopped from a background thread once it has started
        (and its workers leave by themselves if this process ends first)."""
        import threading

        pool, self.pool = self.pool, None
        if pool is None:
            return
        starter = self._starter
        if starter is not None and starter.is_alive():
            threading.Thread(target=_stop, args=(pool, starter), name="aotcombo-pool-stop", daemon=True).start()
        else:
            _stop(pool, None)

    # --- jobs ---------------------------------------------------------------------------

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
        self.queue.append((job, key))
        self._hand_out()

    def plan_pool(self, archs_left: int = 0) -> None:
        """Start workers when the compiles ahead are worth one: a worker takes ~3 s of
        CPU to import torch and triton, and on a busy machine that slows the trace
        running beside it. ``archs_left``: archs still to trace, whose jobs are
        expected to be like the ones queued so far."""
        if self.pool is not None or self.workers < 1 or not self.queue:
            return
        planned = len({job.arch for job, _ in self.queue} | {job.arch for job, _ in self.futures.values()})
        ahead = sum(estimated_seconds(job) for job, _ in self.queue) * (1 + archs_left / max(1, planned))
        if len(self.queue) + archs_left >= 2 and ahead >= POOL_THRESHOLD_S:
            self.reporter.detail(f"about {ahead:.0f} s of kernel compiles ahead")
            self.start_pool()

    def _hand_out(self) -> None:
        """Give queued jobs (from the front) to idle workers. A job handed out cannot
        be taken back, so a worker gets one only when it has none."""
        while self.queue and self._pool_ready() and sum(not f.done() for f in self.futures) < self.workers:
            job, key = self.queue.popleft()
            try:
                future = self.pool.submit(_run_in_worker, job, self.triton_cache_dir)
            except Exception as exc:  # noqa: BLE001 - a broken pool: this process compiles it
                self.queue.appendleft((job, key))
                self._no_pool(exc)
                return
            self.futures[future] = (job, key)

    def _collect(self) -> None:
        import concurrent.futures

        for future in [f for f in self.futures if f.done()]:
            job, key = self.futures.pop(future)
            try:
                binary = future.result()
            except (concurrent.futures.process.BrokenProcessPool, concurrent.futures.CancelledError) as exc:
                self.queue.append((job, key))  # this process compiles it
                self._no_pool(exc)
                continue
            self._store(job, key, binary)

    def finish(self) -> dict[str, Binary]:
        """Compile what is pending; returns every binary by job label."""
        import concurrent.futures

        import collections

        # Long jobs (more source: more sub-kernels) first for the workers, short
        # ones from the back for this process, which hands out work between its own.
        self.queue = collections.deque(sorted(self.queue, key=lambda item: -len(item[0].source)))
        try:
            while self.queue or self.futures:
                self._collect()
                self._hand_out()
                if self.queue:
                    job, key = self.queue.pop()  # the main process takes from the back
                    self._store(job, key, run_job(job, self.triton_cache_dir))
                elif self.futures:
                    concurrent.futures.wait(list(self.futures), return_when=concurrent.futures.FIRST_COMPLETED)
        finally:
            self.close(kill=True)
        return self.results

    def _store(self, job: Job, key: str | None, binary: Binary) -> None:
        self.results[job.label] = binary
        self.compiled += 1
        self.reporter.count("compiled kernels", self.compiled, self.total)
        if key is not None:
            self.cache.put_kernel(key, binary.to_entry())
