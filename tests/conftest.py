"""Shared test setup: ``gpu`` tests are skipped on machines without a CUDA GPU;
``slow`` tests (minutes each under Triton's interpreter on 2 cores: whole zoo models, and
checks whose kernels a fast test also checks) run only when asked for: ``pytest -m slow`` or
``AOTCOMBO_SLOW=1``.

The tests by kind: ``unit/`` (one part of the builder, runtime or tools at a time, on the
CPU), ``models/`` (the model corpora built and run under Triton's interpreter against eager:
the zoo, the samples, PyTorch's combo-kernel tests, the coverage constructs; the corpora of
the last two live beside them) and ``gpu/`` (the runtime and built packages on a GPU, all marked ``gpu``).
What they share is ``aotcombo.testing``."""

import os
from pathlib import Path

import pytest
import torch

from aotcombo.testing.gpu import SAMPLES

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/gpu_check.sh on a machine with a GPU)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    if os.environ.get("AOTCOMBO_SLOW") == "1" or "slow" in (config.getoption("-m") or ""):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with -m slow or AOTCOMBO_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(scope="module")
def full_fp32():
    """Convolutions in true fp32 on both sides of a GPU check: cuDNN's default TF32
    (``allow_tf32``) would put eager itself ~1e-3 off (a package calls the same aten op, so it
    follows the flag)."""
    previous = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = previous


@pytest.fixture(scope="module", params=SAMPLES)
def sample(request):
    """(name, eager sample model on the GPU, its example inputs on the GPU): the GPU tests' samples."""
    from aotcombo.builder.inputs.modelfile import load_model_file

    model, inputs = load_model_file(ROOT / "sample_models" / f"{request.param}.py")
    return request.param, model.cuda(), [t.cuda() for t in inputs]
