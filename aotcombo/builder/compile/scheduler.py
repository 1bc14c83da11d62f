"""Many compile jobs: the build cache first, then a process pool for the misses.

Parallel: ``Scheduler`` compiles cache misses in a ``concurrent.futures`` process
pool (``forkserver`` with torch and triton preloaded, or ``spawn`` with
``AOTCOMBO_POOL=spawn``; ``fork`` is not offered: a child forked from a process
that has run Inductor deadlocked on a lock it inherited), started while the
next arch is traced.
"""

from __future__ import annotations

import os

from ...errors import BuildError
from .triton_job import Binary, Job, compile_error, run_job


# Not "fork": a child forked from a process that has run Inductor deadlocked on a lock it inherited.
POOL_METHODS = ("forkserver", "spawn")
# Estimated compile seconds that pay for starting workers (~3.5 s of CPU to import torch and triton).
POOL_THRESHOLD_S = 4.0
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
        raise compile_error(job, exc) from None


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
                from ..trace.config import KERNEL_RUNTIME_MODULE

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
