"""The build cache: a warm build comes from it, what its trace and kernel keys cover, its
entries (layout, corrupt, unwritable, written concurrently), the CLI's warm rebuild, and the
``aotcombo cache`` command and folder. Builds use a 2-layer MLP for sm_90 to stay fast
(fixtures in conftest.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from aotcombo.builder.cache import store as cache_mod
from aotcombo.builder.cache.fingerprint import Uncacheable
from aotcombo.builder.pipeline import build_package as build
from aotcombo.tools.cli import main
from aotcombo.builder.inputs.modelfile import load_model_file
from aotcombo.progress import Reporter

from _build_helpers import ROOT, sha256


# --- warm builds and the cache's entries --------------------------------------------------------------


def test_warm_build_comes_from_the_cache(builds):
    cold, warm, uncached = builds
    n = len(cold.variants[0].plan.combos)
    assert cold.cache == {**cold.cache, "traces_cached": 0, "kernels_cached": 0, "kernels_compiled": n}
    assert warm.cache == {**warm.cache, "traces_cached": 1, "kernels_cached": n, "kernels_compiled": 0}
    assert uncached.cache["enabled"] is False and uncached.cache["kernels_compiled"] == n
    assert "trace" not in warm.timings


def test_cache_layout_and_no_leftovers(builds, cache_dir):
    files = sorted(p.relative_to(cache_dir).as_posix() for p in cache_dir.rglob("*") if p.is_file())
    assert files and all(f.startswith("v1/kernels/") and f.endswith(".bin") or f.startswith("v1/traces/")
                         and f.endswith(".pkl") for f in files), files
    assert not [f for f in files if ".tmp" in f]


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


# --- what the keys cover ------------------------------------------------------------------


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


# --- the CLI ------------------------------------------------------------------------------------


def test_cli_warm_rebuild(mlp_file, cache_dir, tmp_path, builds):
    env = dict(os.environ, PYTHONPATH=str(ROOT), AOTCOMBO_CACHE_DIR=str(cache_dir))
    run = subprocess.run([sys.executable, "-m", "aotcombo", "build", str(mlp_file), "--arch", "sm_90",
                          "--out", str(tmp_path)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert "trace for sm_90: from the build cache" in run.stderr
    assert "1 from the build cache (" in run.stderr
    wheel = Path(run.stdout.split()[0])  # the pure wheel first, then the native one
    assert sha256(wheel) == sha256(builds[0].wheel)


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
