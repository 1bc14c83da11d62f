"""Fresh-process time to first output: each run is a new ``python -c`` process.

The parent notes the wall clock (time.time(), one clock for every process of the
machine) just before spawning the child; the child prints, as its last line, the wall
clock after ``import torch``, after the model is built or loaded, after its inputs are
on the device, and after its first output is synchronized. Time to first output =
t_out - t_spawn - (median time of ``import torch`` alone, measured the same way).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
a = json.loads(sys.argv[1])
import torch
r = {"t_import": time.time()}
if a["kind"] != "import":
    import importlib, importlib.util
    dev = torch.device(a["device"])
    spec = importlib.util.spec_from_file_location("_bench_sample_" + a["model"], a["file"])
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    torch.set_grad_enabled(False)
    if a["kind"] == "aot":
        model = importlib.import_module(a["model"]).load(a["device"])
        r["model_type"] = type(model).__name__
    else:
        model = sample.get_model().eval().to(dev)
        if a["kind"] == "compile":
            model = torch.compile(model, **a["compile_kwargs"])
    r["t_model"] = time.time()
    xs = [t.to(dev) for t in sample.get_example_inputs()]
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    r["t_inputs"] = time.time()
    out = model(*xs)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    r["t_out"] = time.time()
    leaves = torch.utils._pytree.tree_leaves(out)
    r["n_outputs"] = len(leaves)
    r["finite"] = all(bool(torch.isfinite(t).all()) for t in leaves)
print("BENCH_CHILD " + json.dumps(r), flush=True)
if a["kind"] != "compile":  # skip the slow teardown; compile children shut their workers down first
    sys.stderr.flush()
    import os
    os._exit(0)
"""


def run_child(args: dict, env: dict, timeout: float) -> dict:
    """One child process; its timestamps relative to the spawn, or status/reason on failure.

    The child writes to temp files, not pipes (compile workers it starts may inherit them
    and hold them open), and gets its own session, so that on timeout its whole process
    group (the child and what it started) is killed, nothing else."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t_spawn = time.time()
        p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], env=env, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            return {"status": "TIMEOUT", "reason": f"no exit within {timeout:.0f} s"}
        wall = time.time() - t_spawn
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("BENCH_CHILD ")), None)
    if p.returncode != 0 or line is None:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return {"status": "FAILED", "reason": f"exit {p.returncode}: " + " / ".join(tail)[-400:]}
    r = json.loads(line[len("BENCH_CHILD "):])
    out = {"status": "ok", "import_s": r["t_import"] - t_spawn, "process_wall_s": wall}
    if "t_out" in r:
        out.update(setup_s=r["t_model"] - r["t_import"], inputs_s=r["t_inputs"] - r["t_model"],
                   first_call_s=r["t_out"] - r["t_inputs"], to_first_output_s=r["t_out"] - t_spawn,
                   finite=r["finite"], n_outputs=r["n_outputs"])
    if "model_type" in r:
        out["model_type"] = r["model_type"]
    return out


def _tree_size(path: str) -> tuple[int, int]:
    files = size = 0
    for d, _, names in os.walk(path):
        for n in names:
            files += 1
            try:
                size += os.path.getsize(os.path.join(d, n))
            except OSError:
                pass
    return files, size


class ColdStart:
    """Runs the cold-start measurements within a time budget (``clock.left()`` seconds)."""

    CAPS = {"import": 60, "eager": 150, "aot": 150, "compile cold": 300, "compile warm": 200}
    NEED = {"import": 5, "eager": 10, "aot": 10, "compile cold": 40, "compile warm": 15}  # least time to try

    def __init__(self, device: str, root, clock, log, quick: bool):
        self.device, self.root, self.clock, self.log, self.quick = device, root, clock, log, quick
        self.base_env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.import_runs: list[float] = []
        self.tmp_dirs: list[str] = []

    def _budget(self, kind: str):
        left = self.clock.left() - 15  # keep time for the report
        if left < self.NEED[kind]:
            return None
        return min(self.CAPS[kind], left)

    def import_torch(self, n: int) -> None:
        for _ in range(n):
            t = self._budget("import")
            if t is None:
                return
            r = run_child({"kind": "import"}, self.base_env, t)
            if r["status"] == "ok":
                self.import_runs.append(r["import_s"])
                self.log(f"cold start: import torch alone {r['import_s']:.2f} s")
            else:
                self.log(f"cold start: import torch alone {r['status']}: {r['reason']}")

    def import_summary(self) -> dict:
        runs = self.import_runs
        return {"runs": runs, "median_s": statistics.median(runs) if runs else None}

    def _repeat(self, label: str, kind: str, args: dict, env: dict, n: int) -> dict:
        runs, failures = [], []
        for _ in range(n):
            t = self._budget(kind)
            if t is None:
                failures.append("skipped: time budget")
                break
            r = run_child(args, env, t)
            if r["status"] != "ok":
                failures.append(f"{r['status']}: {r['reason']}")
                self.log(f"cold start: {args['model']} {label}: {r['status']}: {r['reason']}")
                if r["status"] == "TIMEOUT":
                    break
                continue
            runs.append(r)
            self.log(f"cold start: {args['model']} {label}: first output at {r['to_first_output_s']:.2f} s "
                     f"(import {r['import_s']:.2f}, setup {r['setup_s']:.2f}, inputs {r['inputs_s']:.2f}, "
                     f"first call {r['first_call_s']:.2f})")
        if not runs:
            return {"status": "skipped" if failures and failures[0].startswith("skipped") else "FAILED",
                    "reason": "; ".join(failures) or "not run", "runs": []}
        return {"status": "ok", "runs": runs, "failures": failures}

    def measure_model(self, model: str, sample_file: str, reps: int, warm_reps: int, do_aot: bool,
                      compile_kwargs: dict | None) -> dict:
        """eager ×reps, aotcombo ×reps, torch.compile cold ×1 then warm ×warm_reps."""
        base = {"model": model, "file": str(sample_file), "device": self.device}
        out = {"eager": self._repeat("eager", "eager", {**base, "kind": "eager"}, self.base_env, reps)}
        if do_aot:
            out["aotcombo"] = self._repeat("aotcombo", "aot", {**base, "kind": "aot"}, self.base_env, reps)
        if compile_kwargs is not None:
            cache = tempfile.mkdtemp(prefix=f"bench_inductor_{model}_")
            self.tmp_dirs.append(cache)
            env = dict(self.base_env, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"))
            args = {**base, "kind": "compile", "compile_kwargs": compile_kwargs}
            cold = self._repeat("torch.compile cold cache", "compile cold", args, env, 1)
            files, size = _tree_size(cache)
            cold["note"] = f"cache after: {files} files, {size / 1e6:.1f} MB"
            out["torch.compile cold cache"] = cold
            if cold["status"] == "ok":
                out["torch.compile warm cache"] = self._repeat("torch.compile warm cache", "compile warm", args,
                                                               env, warm_reps)
            else:
                out["torch.compile warm cache"] = {"status": "skipped", "reason": "the cold run failed", "runs": []}
        return out

    def finish(self, per_model: dict) -> None:
        """Subtract the import-torch median; fill medians in place; remove the temp caches."""
        base = self.import_summary()["median_s"]
        for cs in per_model.values():
            for r in cs.values():
                if r.get("status") != "ok":
                    continue
                runs = r["runs"]
                med = lambda k: statistics.median(x[k] for x in runs)  # noqa: E731
                r["to_first_output_s"] = med("to_first_output_s")
                r["median_s"] = r["to_first_output_s"] - base if base is not None else None
                r["setup_s"], r["inputs_s"], r["first_call_s"] = med("setup_s"), med("inputs_s"), med("first_call_s")
                r["child_import_s"] = med("import_s")
                types = sorted({x["model_type"] for x in runs if "model_type" in x})
                if types:
                    r["note"] = f"load() with default options gave {'/'.join(types)}"
                if not all(x.get("finite", True) for x in runs):
                    r["note"] = (r.get("note", "") + "; NON-FINITE OUTPUT").strip("; ")
        for d in self.tmp_dirs:
            shutil.rmtree(d, ignore_errors=True)
