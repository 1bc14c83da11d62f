"""What the build-experience tests share (test_build_cache, test_build_wheel,
test_build_workers, test_inspect): the checkout, a 2-layer MLP model file (built for sm_90 to
stay fast; its fixtures are in conftest.py) and a file's hash."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
