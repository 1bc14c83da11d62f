"""What the CLI error tests share (test_cli_input_errors, test_cli_build_errors,
test_cli_interrupts): every build failure a user can meet is a one-paragraph message with a
fix, its own exit status, no traceback, and nothing written to --out. Their fixtures (a build
cache for each module, the MLP's model file) are in conftest.py."""

from __future__ import annotations

from pathlib import Path

from aotcombo.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]

MLP = """\
import torch
from torch import nn


def get_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))


def get_example_inputs():
    return (torch.randn(8, 32, generator=torch.Generator().manual_seed(1)),)
"""


def write(tmp_path, text, name="model.py"):
    path = tmp_path / name
    path.write_text(text)
    return path


def run(capsys, *argv):
    code = main(["build", *map(str, argv)] if argv and argv[0] not in ("inspect", "cache") else list(map(str, argv)))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, captured.err


def assert_one_error(err, *fragments):
    lines = [line for line in err.splitlines() if line.startswith("aotcombo: error:")]
    assert len(lines) == 1, err
    assert "  fix: " in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def assert_nothing_written(out: Path):
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
