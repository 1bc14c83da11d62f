"""``aotcombo inspect``: text, JSON and PNG, of a wheel, a folder or an installed package; the
PNG without matplotlib, and no matplotlib import without --png. The package inspected is a
2-layer MLP built for sm_90 (fixtures in conftest.py)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
import zlib

import pytest

from aotcombo.tools.cli import main

from _build_helpers import ROOT


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
