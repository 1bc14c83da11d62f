"""A build does not depend on what the process asked torch before it (issue 27's torchao case)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ASKED_FIRST = """\
import sys
sys.path.insert(0, {root!r})
import torch
from torch.utils._triton import has_triton

# What torchao does at import (transformers imports it whenever it is installed): with no GPU
# here, torch finds "no Triton" and caches the answer.
assert not has_triton()
import aotcombo


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


aotcombo.build(Model(), (torch.randn(8, 32),), arch=["sm_90"], name="asked_first", out={out!r}, cache=False,
               native=False)
print("built")
"""


def test_a_build_after_torch_was_asked_about_triton_without_a_gpu(tmp_path):
    script = ASKED_FIRST.format(root=str(ROOT), out=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "built" in done.stdout, done.stderr[-2000:]
