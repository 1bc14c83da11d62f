"""Kernels compiled in worker processes: the same wheel as a serial build, the scheduler's
spawn and forkserver pools, a build at a script's top level (a worker imports the script),
and the resources cuobjdump reports. Builds use a 2-layer MLP for sm_90 to stay fast
(fixtures in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from aotcombo.builder.cache import store as cache_mod
from aotcombo.builder.codegen import combo as codegen_combo
from aotcombo.builder.compile import scheduler as compile_scheduler
from aotcombo.builder.compile import triton_job as compile_triton_job
from aotcombo.builder.pipeline import build_package as build
from aotcombo.builder.inputs.modelfile import load_model_file
from aotcombo.progress import Reporter

from _build_helpers import ROOT, sha256


def _not_here(job, triton_cache_dir=None):
    raise AssertionError(f"{job.label} was compiled in the main process, not in a worker")


def test_parallel_compile_gives_the_same_wheel(mlp_file, tmp_path, builds, monkeypatch):
    model, inputs = load_model_file(mlp_file)
    serial = build(model, inputs, arch=["sm_80", "sm_90"], name="mlp", out=tmp_path / "serial", cache=False, jobs=1)
    # Every kernel of the parallel build goes to a worker: a pool however small the
    # build, and nothing compiled here after it broke.
    monkeypatch.setattr(compile_scheduler, "POOL_THRESHOLD_S", 0.0)
    monkeypatch.setattr(compile_scheduler, "run_job", _not_here)
    parallel = build(model, inputs, arch=["sm_80", "sm_90"], name="mlp", out=tmp_path / "parallel", cache=False,
                     jobs=2)
    assert sha256(serial.wheel) == sha256(parallel.wheel)
    assert parallel.cache["kernels_compiled"] == 2 * len(serial.variants[0].plan.combos)
    variants = serial.manifest.specialization().variants
    assert set(variants) == {"sm_80", "sm_90", "ptx"} and serial.manifest.ptx_arch == 80  # sm_80's PTX: newer GPUs


def _jobs(builds) -> list:
    """One of the MLP's kernels for four archs."""

    variant = builds[0].variants[0]
    combo = variant.plan.combos[0]
    signature, aligned = codegen_combo.combo_signature(combo)
    return [compile_triton_job.Job(f"sm_{arch}/{combo.name}",
                         codegen_combo.render_combo(combo, pdl=arch >= codegen_combo.PDL_MIN_ARCH),
                         combo.name, tuple(signature.items()), tuple(aligned), arch, combo.num_warps)
            for arch in (80, 86, 89, 90)]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_scheduler_compiles_in_workers(builds, method, monkeypatch):
    jobs = _jobs(builds)
    expected = {job.label: compile_triton_job.run_job(job).cubin for job in jobs}
    monkeypatch.setattr(compile_scheduler, "run_job", _not_here)
    scheduler = compile_scheduler.Scheduler(cache_mod.Cache(None), 2, Reporter(quiet=True), None, method=method)
    scheduler.start_pool()
    scheduler.starting.join()  # the workers are up: each job goes to them as it is added
    for job in jobs:
        scheduler.add(job)
    futures = list(scheduler.futures)
    results = scheduler.finish()
    assert len(futures) == 4 and not scheduler.queue and all(f.exception() is None for f in futures)
    assert scheduler.compiled == scheduler.total == 4 and scheduler.pool is None
    assert {label: binary.cubin for label, binary in results.items()} == expected


UNGUARDED = """\
import sys
import aotcombo
from aotcombo.builder.compile import scheduler as compile_scheduler

sys.path.insert(0, {src!r})
from mlp import get_example_inputs, get_model

compile_scheduler.POOL_THRESHOLD_S = 0.0  # workers however small the build
aotcombo.build(get_model(), get_example_inputs(), arch=["sm_80", "sm_90"], name="mlp", out={out!r}, cache=False, jobs=2)
print("built")
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_build_at_a_script_s_top_level_runs_once(mlp_file, tmp_path, method):
    """A compile worker imports the script that started the build (as any multiprocessing
    child does): the build refuses to start there, naming the fix, so the script builds once
    and its --out holds the two wheels and nothing half-written."""
    script, out = tmp_path / "unguarded.py", tmp_path / "out"
    script.write_text(UNGUARDED.format(src=str(mlp_file.parent), out=str(out)))
    env = {**os.environ, "AOTCOMBO_POOL": method, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("built") == 1
    assert sorted(p.name for p in out.iterdir()) == ["mlp-0.1.0-cp310-abi3-manylinux_2_17_x86_64.whl",
                                                     "mlp-0.1.0-py3-none-any.whl"]
    assert "if __name__ == " in done.stderr


def test_a_compile_worker_importing_the_script_refuses_to_build(monkeypatch):
    import multiprocessing

    from aotcombo.builder.inputs.environment import check_environment
    from aotcombo.errors import EnvironmentError_

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(EnvironmentError_, match="compile worker") as failure:
        check_environment()
    assert "if __name__" in failure.value.fix


def test_resource_usage_from_cuobjdump(builds):
    binary = next(iter(builds[0].variants[0].binaries.values()))
    usage = compile_triton_job.resource_usage(binary.cubin, binary.name)
    assert usage["registers"] == binary.registers > 0 and usage["local"] == binary.spills == 0
    assert compile_triton_job.resource_usage(b"not an elf", binary.name) == {}
