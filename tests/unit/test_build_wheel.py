"""The Python API and the wheel it writes: a cheap import, ``aotcombo.build`` and
``build_package``, reproducible and normalised wheels with no machine paths, and the manifest
(what ``inspect`` and the runtime read; its decoding errors). Builds use a 2-layer MLP for
sm_90 to stay fast (fixtures in conftest.py)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch

import aotcombo
from aotcombo.runtime.manifest import Manifest, ManifestError
from aotcombo.builder.pipeline import BuildResult, build_package as build
from aotcombo.builder.inputs.modelfile import load_model_file

from _build_helpers import ROOT, sha256


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


# --- reproducible wheels and their manifest ---------------------------------------------------


def test_reproducible(builds):
    cold, warm, uncached = builds
    assert sha256(cold.wheel) == sha256(warm.wheel) == sha256(uncached.wheel)
    assert cold.wheel.name == "mlp-0.1.0-py3-none-any.whl"


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
