"""Build experience: the build cache, reproducible wheels, the Python API,
``aotcombo inspect`` (text, JSON, PNG; wheel, folder, installed package) and
progress output. Builds use a 2-layer MLP for sm_90 to stay fast."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

import aotcombo
from aotcombo.builder.cache import store as cache_mod
from aotcombo.builder.cache.fingerprint import Uncacheable
from aotcombo.runtime.manifest import Manifest, ManifestError
from aotcombo.builder.codegen import combo as codegen_combo
from aotcombo.builder.compile import scheduler as compile_scheduler
from aotcombo.builder.compile import triton_job as compile_triton_job
from aotcombo.builder.pipeline import BuildResult, build_package as build
from aotcombo.tools.cli import main
from aotcombo.builder.inputs.modelfile import load_model_file
from aotcombo.progress import Reporter

ROOT = Path(__file__).resolve().parents[2]

MLP = """\
import torch
from torch import nn

HIDDEN = 64


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, 16))


def get_example_inputs():
    return (torch.randn(8, 32, generator=torch.Generator().manual_seed(1)),)
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("experience")


@pytest.fixture(scope="module")
def mlp_file(workdir):
    path = workdir / "src" / "mlp.py"
    path.parent.mkdir()
    path.write_text(MLP)
    return path


@pytest.fixture(scope="module")
def cache_dir(workdir):
    return workdir / "cache"


@pytest.fixture(scope="module")
def builds(mlp_file, cache_dir, workdir):
    """The MLP built three times: cold cache, warm cache, no cache."""
    model, inputs = load_model_file(mlp_file)
    common = dict(arch=["sm_90"], name="mlp", jobs=1, model_file=mlp_file)
    cold = build(model, inputs, out=workdir / "cold", cache=cache_dir, **common)
    warm = build(model, inputs, out=workdir / "warm", cache=cache_dir, **common)
    uncached = build(model, inputs, out=workdir / "uncached", cache=False, **common)
    return cold, warm, uncached


# --- the Python API ------------------------------------------------------------------------


def test_import_is_cheap():
    code = ("import sys, time; t = time.perf_counter(); import aotcombo; dt = time.perf_counter() - t; "
            "print(dt, sorted(m for m in ('torch', 'triton', 'jinja2', 'sympy') if m in sys.modules)); "
            "print(callable(aotcombo.build), aotcombo.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.splitlines()
    seconds, loaded = out[0].split(" ", 1)
    assert loaded == "[]" and float(seconds) < 0.5
    assert out[1] == f"True {aotcombo.__version__}"


def test_python_api_returns_the_wheel_path(mlp_file, cache_dir, tmp_path, builds):
    model, inputs = load_model_file(mlp_file)
    wheel = aotcombo.build(model, inputs, arch=["sm_90"], name="mlp", out=tmp_path, cache=cache_dir, jobs=1,
                           model_file=mlp_file)
    assert isinstance(wheel, Path) and wheel.parent == tmp_path and wheel.is_file()
    assert sha256(wheel) == sha256(builds[0].wheel)
    result = aotcombo.build_package(model, inputs, arch="sm_90", name="mlp", out=tmp_path / "again",
                                    cache=cache_dir, jobs=1, model_file=mlp_file)
    assert isinstance(result, BuildResult) and sha256(result.wheel) == sha256(wheel)
    assert isinstance(build(model, inputs, arch=["sm_90"], name="mlp", out=tmp_path / "third", cache=cache_dir,
                            jobs=1, model_file=mlp_file), BuildResult)  # the detailed form, as before


# --- cache and reproducibility ------------------------------------------------------------------


def test_reproducible(builds):
    cold, warm, uncached = builds
    assert sha256(cold.wheel) == sha256(warm.wheel) == sha256(uncached.wheel)
    assert cold.wheel.name == "mlp-0.1.0-py3-none-any.whl"


def test_warm_build_comes_from_the_cache(builds):
    cold, warm, uncached = builds
    n = len(cold.variants[0].plan.combos)
    assert cold.cache == {**cold.cache, "traces_cached": 0, "kernels_cached": 0, "kernels_compiled": n}
    assert warm.cache == {**warm.cache, "traces_cached": 1, "kernels_cached": n, "kernels_compiled": 0}
    assert uncached.cache["enabled"] is False and uncached.cache["kernels_compiled"] == n
    assert "trace" not in warm.timings


def test_trace_key_covers_every_module_the_trace_runs():
    """A module of the builder the trace stage imports (a rewrite before Inductor, its rules) whose
    source the key leaves out would let an edited aotcombo reuse a trace made by the old code."""
    import aotcombo.builder.trace.entry  # noqa: F401

    builder = Path(cache_mod.BUILDER)
    stage = ("aotcombo.builder.trace", "aotcombo.builder.kernels")
    loaded = {Path(m.__file__).resolve().relative_to(builder).as_posix() for name, m in list(sys.modules.items())
              if name.startswith(stage) and getattr(m, "__file__", None)}
    assert loaded <= set(cache_mod.TRACE_SOURCES), loaded - set(cache_mod.TRACE_SOURCES)
    assert "kernels/conv/cudnn_epilogue.py" in cache_mod.TRACE_SOURCES


def test_cache_layout_and_no_leftovers(builds, cache_dir):
    files = sorted(p.relative_to(cache_dir).as_posix() for p in cache_dir.rglob("*") if p.is_file())
    assert files and all(f.startswith("v1/kernels/") and f.endswith(".bin") or f.startswith("v1/traces/")
                         and f.endswith(".pkl") for f in files), files
    assert not [f for f in files if ".tmp" in f]


def test_no_machine_or_temporary_paths_in_the_wheel(builds, mlp_file):
    wheel = builds[0].wheel
    banned = [b"aotcombo-build-", b"aotcombo-failed", tempfile.gettempdir().encode() + b"/", str(ROOT).encode(),
              str(mlp_file.parent).encode(), os.path.dirname(torch.__file__).encode()]
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            data = zf.read(name)
            if name.endswith("weights.pt"):  # a zip of its own: look inside too
                with zipfile.ZipFile(io.BytesIO(data)) as inner:
                    data = b"".join(inner.read(n) for n in inner.namelist()) + "".join(inner.namelist()).encode()
            for b in banned:
                assert b not in data, (name, b)


def test_wheel_is_normalised(builds):
    wheel = builds[0].wheel
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        dist = [n for n in names if ".dist-info/" in n]
        assert names == sorted(n for n in names if n not in dist) + dist
        assert dist[-1] == "mlp-0.1.0.dist-info/RECORD"
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.external_attr >> 16 == 0o100644
        record = zf.read(dist[-1]).decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = zf.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)
        manifest = zf.read("mlp/manifest.json").decode()
        assert manifest == json.dumps(json.loads(manifest), separators=(",", ":"), sort_keys=True) + "\n"


def test_manifest_has_what_inspect_needs_and_what_the_runtime_reads(builds):
    m = builds[0].manifest
    assert Manifest.from_json(m.to_json()) == m  # the one contract, both ways
    with zipfile.ZipFile(builds[0].wheel) as zf:
        assert Manifest.from_json(zf.read("mlp/manifest.json")) == m
        assert hashlib.sha256(zf.read("mlp/weights.pt")).hexdigest() == m.weights.sha256
        for k in (k for v in m.specialization().variants.values() for k in v.kernels):
            assert hashlib.sha256(zf.read(f"mlp/{k.image}")).hexdigest() == k.sha256
    assert m.weights.file == "weights.pt"
    assert len(m.weights.tensors) == 4 and m.weights.bytes == (32 * 64 + 64 + 64 * 16 + 16) * 4
    assert {t.name for t in m.weights.tensors} == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert "ptx" not in m.specialization().variants  # sm_90a's PTX runs on sm_90 alone, where the cubin is
    for key in ("sm_90",):
        variant = m.specialization().variants[key]
        assert variant.schedule and variant.stats.launches_per_forward == len(variant.schedule)
        after_extern = {step.name for before, step in zip((None, *variant.schedule), variant.schedule)
                        if before is not None and before.kind == "extern"}
        for k in variant.kernels:
            assert isinstance(k.registers, int) and k.registers > 0
            assert k.local_bytes == 0 and isinstance(k.level, int)
            # sm_90: launched early, waiting on the GPU for the kernel before, unless that is an extern call
            assert k.pdl == (k.name not in after_extern), (k.name, variant.schedule)
            assert k.subs and all(b.programs >= 1 and b.block for b in k.subs)
        # every kernel lets the launch after it start (a no-op before a launch that is not early),
        # so that its image does not depend on what follows it
        with zipfile.ZipFile(builds[0].wheel) as zf:
            sources = json.loads(zf.read("mlp/kernels/sources.json"))
        assert all("gdc_launch_dependents()" in sources[k.image] for k in variant.kernels)


def test_manifest_decoding_names_what_is_wrong(builds):
    def edited(change):
        data = json.loads(builds[0].manifest.to_json())
        change(data)
        return json.dumps(data)

    for change, message in (
        (lambda d: d.update(format=1), "manifest format 1; this runtime reads format 2"),
        (lambda d: d["weights"].update(file_bytes="12"), r"manifest.weights.file_bytes: expected int, got '12'"),
        (lambda d: d["shapes"].update(mode="ragged"), "manifest.shapes: unknown mode 'ragged'"),
        (lambda d: d.update(nme=d.pop("name")), "manifest: unknown field 'nme'"),
        (lambda d: d["specializations"][0]["variants"]["sm_90"].pop("program"), "missing 1 required"),
        (lambda d: d["specializations"][0]["inputs"][0].update(shape=[1, [2]]), r"inputs\[0\].shape\[1\]"),
    ):
        with pytest.raises(ManifestError, match=message):
            Manifest.from_json(edited(change))


def test_corrupt_cache_entries_are_misses(mlp_file, tmp_path):
    model, inputs = load_model_file(mlp_file)
    cache = tmp_path / "cache"
    first = build(model, inputs, arch=["sm_90"], name="mlp", out=tmp_path / "a", cache=cache, jobs=1,
                  model_file=mlp_file)
    for entry in cache.rglob("*.bin"):
        entry.write_bytes(entry.read_bytes()[:100])  # truncated
    for entry in cache.rglob("*.pkl"):
        entry.write_bytes(b"garbage")
    again = build(model, inputs, arch=["sm_90"], name="mlp", out=tmp_path / "b", cache=cache, jobs=1,
                  model_file=mlp_file)
    assert again.cache["traces_cached"] == 0 and again.cache["kernels_cached"] == 0
    assert sha256(first.wheel) == sha256(again.wheel)


def test_unwritable_cache_is_a_warning(mlp_file, tmp_path, builds):
    model, inputs = load_model_file(mlp_file)
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("")
    stream = io.StringIO()
    result = build(model, inputs, arch=["sm_90"], name="mlp", out=tmp_path / "out", cache=blocker, jobs=1,
                   model_file=mlp_file, reporter=Reporter(quiet=True, stream=stream))
    assert "warning: cannot write the build cache" in stream.getvalue()
    assert stream.getvalue().count("warning") == 1
    assert sha256(result.wheel) == sha256(builds[0].wheel)


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path):
    cache = cache_mod.Cache(tmp_path)
    entry = {"name": "k", "arch": 90, "cubin": os.urandom(1 << 20), "ptx": "x" * 100000, "num_warps": 4}
    key = "ab" * 32
    errors = []

    def writer():
        for _ in range(10):
            cache.put_kernel(key, entry)

    def reader():
        for _ in range(200):
            got = cache_mod.Cache(tmp_path).get_kernel(key)
            if got is not None and got != entry:
                errors.append("partial")

    threads = [threading.Thread(target=writer) for _ in range(3)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert cache.get_kernel(key) == entry
    assert [p.name for p in (tmp_path / "v1" / "kernels" / "ab").iterdir()] == [f"{key}.bin"]


def test_kernel_key_covers_what_the_compile_sees():
    base = dict(source="src", name="k", signature={"a": "*fp32"}, aligned=["a"], arch=90,
                options={"num_warps": 4, "num_stages": 1})
    key = cache_mod.kernel_key(**base)
    for change in (dict(source="src2"), dict(name="k2"), dict(signature={"a": "*fp16"}), dict(aligned=[]),
                   dict(arch=80), dict(options={"num_warps": 8, "num_stages": 1})):
        assert cache_mod.kernel_key(**{**base, **change}) != key, change
    assert cache_mod.kernel_key(**base) == key


def test_trace_key_follows_code_and_structure_not_weight_values(tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helpers.py").write_text("import torch\n\ndef act(x):\n    return torch.relu(x)\n")
    source = ("import torch\nfrom torch import nn\nfrom helpers import act\n\nSCALE = 2.0\n\n"
              "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.lin = nn.Linear(4, 4)\n        self.mode = 'a'\n\n"
              "    def forward(self, x):\n        return act(self.lin(x)) * SCALE\n\n"
              "def get_model():\n    return M()\n\ndef get_example_inputs():\n    return (torch.randn(2, 4),)\n")
    path = folder / "model.py"

    def key(text=source, helper=None, tweak=None, inputs=None):
        path.write_text(text)
        if helper is not None:
            (folder / "helpers.py").write_text(helper)
        model, example = load_model_file(path)
        if tweak:
            tweak(model)
        return cache_mod.trace_key(model, inputs or example, 90, path)

    base = key()
    assert key() == base
    assert key(tweak=lambda m: torch.nn.init.zeros_(m.lin.weight)) == base  # values: not traced
    assert key(text=source.replace("SCALE = 2.0", "SCALE = 3.0")) != base
    assert key(helper="import torch\n\ndef act(x):\n    return torch.tanh(x)\n") != base
    (folder / "helpers.py").write_text("import torch\n\ndef act(x):\n    return torch.relu(x)\n")
    assert key() == base
    assert key(tweak=lambda m: setattr(m, "mode", "b")) != base
    assert key(tweak=lambda m: m.lin.to(torch.float64)) != base
    assert key(inputs=(torch.randn(3, 4),)) != base
    assert key(tweak=lambda m: m.register_forward_hook(lambda mod, i, o: o * 2)) != base
    model, example = load_model_file(path)
    assert cache_mod.trace_key(model, example, 80, path) != cache_mod.trace_key(model, example, 90, path)


def test_a_library_in_a_virtual_environment_is_part_of_the_trace_key(tmp_path, monkeypatch):
    """In a virtual environment Python's platstdlib is the environment's lib/pythonX.Y, which
    holds its site-packages: a library installed there (transformers, timm) is third-party code
    whose source is part of a trace's key, not code a tool version names; else a change to it
    (an upgrade) would reuse traces of the old code."""
    import importlib
    import sysconfig

    from aotcombo.builder.inputs import usercode

    lib = tmp_path / "venv" / "lib" / "python3.11"
    package = lib / "site-packages" / "scaledlib"
    package.mkdir(parents=True)
    source = "import torch\n\nclass Scaled(torch.nn.Module):\n    def forward(self, x):\n        return x * {}\n"
    (package / "__init__.py").write_text(source.format(2))
    paths = {**sysconfig.get_paths(), "platstdlib": str(lib)}
    monkeypatch.setattr(sysconfig, "get_paths", lambda *a, **k: paths)
    monkeypatch.syspath_prepend(str(lib / "site-packages"))
    for cached in (usercode.code_kind, usercode._stdlib_roots):
        cached.cache_clear()
    try:
        scaledlib = importlib.import_module("scaledlib")
        inputs = (torch.randn(4),)
        before = cache_mod.trace_keys(scaledlib.Scaled(), inputs, [90], None)
        (package / "__init__.py").write_text(source.format(3))
        after = cache_mod.trace_keys(scaledlib.Scaled(), inputs, [90], None)
        assert usercode.code_kind(scaledlib.__file__) == usercode.THIRD_PARTY
        assert before != after
    finally:
        sys.modules.pop("scaledlib", None)
        for cached in (usercode.code_kind, usercode._stdlib_roots):
            cached.cache_clear()


def test_trace_key_sees_closures_and_refuses_what_it_cannot_read():
    class Fn(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    def scaled(k):
        return Fn(lambda x: x * k)

    x = (torch.randn(4),)
    assert cache_mod.trace_key(scaled(2.0), x, 90) == cache_mod.trace_key(scaled(2.0), x, 90)
    assert cache_mod.trace_key(scaled(2.0), x, 90) != cache_mod.trace_key(scaled(3.0), x, 90)
    with pytest.raises(Uncacheable):
        cache_mod.trace_key(Fn(threading.Lock()), x, 90)


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


# --- the CLI, end to end ----------------------------------------------------------------------------


def test_cli_warm_rebuild(mlp_file, cache_dir, tmp_path, builds):
    env = dict(os.environ, PYTHONPATH=str(ROOT), AOTCOMBO_CACHE_DIR=str(cache_dir))
    run = subprocess.run([sys.executable, "-m", "aotcombo", "build", str(mlp_file), "--arch", "sm_90",
                          "--out", str(tmp_path)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert "trace for sm_90: from the build cache" in run.stderr
    assert "1 from the build cache (" in run.stderr
    wheel = Path(run.stdout.split()[0])  # the pure wheel first, then the native one
    assert sha256(wheel) == sha256(builds[0].wheel)


# --- inspect ---------------------------------------------------------------------------------------------


def test_inspect_text(builds, capsys):
    assert main(["inspect", str(builds[0].wheel)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mlp 0.1.0  (wheel ")
    assert "archs: cubins for sm_90; no PTX (sm_90 and later: Triton's PTX is for that arch alone" in out
    assert "launches per forward: " in out and "un-combined: " in out
    assert "weights: 4 tensors, 12.6 kB" in out
    assert "combo_0" in out and "regs" in out and "XBLOCK=" in out


def test_inspect_json_folder_and_installed_package(builds, tmp_path, monkeypatch, capsys):
    wheel = builds[0].wheel
    assert main(["inspect", str(wheel), "--json"]) == 0
    from_wheel = json.loads(capsys.readouterr().out)
    assert from_wheel["archs"] == ["sm_90"] and from_wheel["stats"]["kernels"] >= 1
    combo = from_wheel["variants"]["sm_90"]["combos"][0]
    assert combo["registers"] > 0 and combo["sub_kernels"][0]["block"]

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    for target in (site / "mlp", site):
        assert main(["inspect", str(target), "--json"]) == 0
        info = json.loads(capsys.readouterr().out)
        assert info["variants"] == from_wheel["variants"] and info["source"]["kind"] == "folder"

    monkeypatch.syspath_prepend(str(site))
    assert main(["inspect", "mlp", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["source"]["kind"] == "installed package" and info["variants"] == from_wheel["variants"]
    assert "mlp" not in sys.modules  # found, never imported


def _png_size(data: bytes) -> tuple[int, int]:
    """Check a PNG's signature and every chunk's CRC; returns (width, height)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, kinds = 8, []
    while at < len(data):
        (n,) = struct.unpack(">I", data[at: at + 4])
        kind, body = data[at + 4: at + 8], data[at + 8: at + 8 + n]
        assert struct.unpack(">I", data[at + 8 + n: at + 12 + n])[0] == zlib.crc32(kind + body)
        kinds.append(kind)
        at += 12 + n
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    return struct.unpack(">II", data[16:24])


def test_inspect_png(builds, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    png = tmp_path / "partition.png"
    assert main(["inspect", str(builds[0].wheel), "--png", str(png), "-q"]) == 0
    assert capsys.readouterr().out == ""  # -q: the image only
    data = png.read_bytes()
    width, height = _png_size(data)
    assert width >= 600 and height >= 100 and len(data) < 1_000_000
    pixels = imread(png)
    assert pixels.shape[:2] == (height, width)
    rgb = (pixels[..., :3] * 255).round().reshape(-1, 3)

    def drawn(colour) -> bool:  # near enough: edges are anti-aliased
        return bool((abs(rgb - colour).max(axis=1) <= 6).any())

    assert drawn((219, 234, 254)) and drawn((147, 197, 253))  # a combo kernel's box, a sub-kernel in it
    assert drawn((24, 24, 27)) and drawn((255, 255, 255))  # text on white
    assert b"Software" not in data and b"matplotlib" not in data.lower()  # no version in the file
    # deterministic: the same package draws the same bytes
    again = tmp_path / "again.png"
    assert main(["inspect", str(builds[0].wheel), "--png", str(again), "-q"]) == 0
    assert again.read_bytes() == data
    assert main(["inspect", str(builds[0].wheel), "--png", str(tmp_path / "x.png"), "--arch", "sm_75"]) == 2
    assert main(["inspect", str(builds[0].wheel), "--png", str(tmp_path / "no" / "x.png"), "-q"]) == 7


def test_inspect_png_of_a_hundred_launches(builds, tmp_path):
    """A GPT-2-sized partition (100 launches over 60 levels, long names, a combo of 40
    kernels) stays a legible, small image: wide enough for its labels, not endless."""
    pytest.importorskip("matplotlib")
    from aotcombo.tools.inspection import inspect_package, render_png

    info = inspect_package(builds[0].wheel)
    variant = info["variants"]["sm_90"]
    sub = dict(variant["combos"][0]["sub_kernels"][0])
    combos, schedule = [], []
    for i in range(60):
        subs = [dict(sub, kernel=f"triton_per_fused_add_gelu_mul_native_layer_norm_view_{i}_{j}", programs=8 + j)
                for j in range(40 if i == 30 else 1 + i % 3)]
        combos.append(dict(variant["combos"][0], name=f"combo_{i}", level=3 * i, sub_kernels=subs))
        schedule.append({"combo": f"combo_{i}", "level": 3 * i})
        if i < 40:
            schedule.append({"extern": "aten::_scaled_dot_product_flash_attention.default", "level": 3 * i})
    variant.update(combos=combos, schedule=schedule,
                   stats={"kernels": sum(len(c["sub_kernels"]) for c in combos), "combos": 60, "extern_calls": 40})
    png = render_png(info, tmp_path / "big.png")
    data = png.read_bytes()
    width, height = _png_size(data)
    assert 800 <= width <= 2000 and 2000 <= height <= 6000 and len(data) < 1_000_000


def test_inspect_png_without_matplotlib(builds, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    png = tmp_path / "partition.png"
    assert main(["inspect", str(builds[0].wheel), "--png", str(png), "-q"]) == 8
    err = capsys.readouterr().err
    assert err.startswith("aotcombo: error: cannot inspect: --png needs matplotlib") and "Traceback" not in err
    assert "fix: pip install 'aotcombo[png]'" in err
    assert not png.exists()


def test_inspect_without_png_never_imports_matplotlib(builds):
    code = ("import sys; from aotcombo.tools import inspection; "
            "print(sorted(m for m in ('torch', 'triton', 'matplotlib') if m in sys.modules)); "
            "from aotcombo.tools.cli import main; main(['inspect', sys.argv[1], '-q']); "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(builds[0].wheel)], capture_output=True, text=True,
                         check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.splitlines()
    assert out[0] == "[]" and out[-1] == "False"


def test_cache_command(builds, cache_dir, tmp_path, monkeypatch, capsys):
    import shutil

    copy = tmp_path / "cache"
    shutil.copytree(cache_dir, copy)
    monkeypatch.setenv("AOTCOMBO_CACHE_DIR", str(copy))
    assert main(["cache"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(copy) and out[1].startswith("  kernels: ") and not out[1].startswith("  kernels: 0 ")
    assert main(["cache", "--clear"]) == 0
    assert "cleared" in capsys.readouterr().err
    assert cache_mod.Cache(copy).usage() == {"kernels": {"entries": 0, "bytes": 0},
                                             "traces": {"entries": 0, "bytes": 0}}


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("AOTCOMBO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_mod.default_dir() == tmp_path / "xdg" / "aotcombo"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert cache_mod.default_dir() == Path.home() / ".cache" / "aotcombo"
    monkeypatch.setenv("AOTCOMBO_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_mod.default_dir() == tmp_path / "mine"
    assert cache_mod.Cache.from_options(True).root == tmp_path / "mine"
    monkeypatch.setenv("AOTCOMBO_NO_CACHE", "1")
    assert not cache_mod.Cache.from_options(True).enabled
    assert cache_mod.Cache.from_options(tmp_path / "x").enabled  # an explicit folder wins


# --- progress ----------------------------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    reporter = Reporter(stream=stream)
    with reporter.stage("compile 3 kernels"):
        for i in range(1, 4):
            reporter.count("compiled kernels", i, 3)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "aotcombo: compiled kernels 3/3"
    assert lines[1].startswith("aotcombo: compile 3 kernels (") and lines[1].endswith(" s)")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_progress_on_a_terminal_rewrites_one_line():
    stream = _Tty()
    reporter = Reporter(stream=stream)
    with reporter.stage("compile 2 kernels"):
        reporter.count("compiled kernels", 1, 2)
        reporter.count("compiled kernels", 2, 2)
    text = stream.getvalue()
    assert "compile 2 kernels ...\r" in text and "compiled kernels 1/2\r" in text and "\x1b[2K" in text
    assert text.rstrip().endswith(" s)")


def test_progress_quiet_and_verbose():
    stream = io.StringIO()
    quiet = Reporter(quiet=True, stream=stream)
    with quiet.stage("x"):
        quiet.count("y", 1, 1)
        quiet.detail("z")
    assert stream.getvalue() == ""
    verbose = Reporter(verbose=True, stream=stream)
    verbose.count("compiled kernels", 1, 2)
    verbose.detail("more")
    assert stream.getvalue().splitlines() == ["aotcombo: compiled kernels 1/2", "aotcombo: more"]


def test_stage_that_fails_prints_no_timing_line():
    stream = _Tty()
    reporter = Reporter(stream=stream)
    with pytest.raises(ValueError):
        with reporter.stage("trace"):
            raise ValueError
    assert "(" not in stream.getvalue() and stream.getvalue().endswith("\x1b[2K")
