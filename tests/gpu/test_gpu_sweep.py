"""The model sweep's packages on a GPU: each matches eager's outputs, computed on the build
machine on fresh random inputs (scripts/model_sweep.py --wheels .carry/sweep --no-interpret:
beside each case's wheels, expected.pt). This checks what the interpreter cannot: the wheel
built on one torch runs on the device's torch, through its cubins and extern ops.

    scripts/gpu_check.sh .carry/sweep/*   with AOTCOMBO_GPU_TEST_FILES=tests/gpu/test_gpu_sweep.py

The reference is float32 eager on the CPU, so cuDNN's TF32 is off for the package's
convolutions (conftest's ``full_fp32``; matmuls are full fp32 by torch's default): the
tolerance is float32's, 1e-4 relative L2 per output. A sweep built in 16-bit floats
(``--dtype``) keeps each output's limit beside float32 eager's outputs: max(1e-2, 2 x the
16-bit eager model's own error). A sweep built with ``--dynamic`` keeps each size it was checked
at (``calls``): the package is checked at every one.
"""

import os
from pathlib import Path

import pytest
import torch
from torch.utils import _pytree

from aotcombo.testing.compare import TOLERANCE, relative_error
from aotcombo.testing.gpu import import_package

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("full_fp32")]
SWEEP = Path(os.environ.get("AOTCOMBO_SWEEP_DIR", Path(__file__).resolve().parents[2] / ".carry" / "sweep"))
CASES = sorted(p.parent.name for p in SWEEP.glob("*/expected.pt"))


@pytest.mark.skipif(not CASES, reason=f"no sweep packages in {SWEEP}")
@pytest.mark.parametrize("case", CASES)
def test_sweep_case_matches_eager_on_gpu(case):
    expected = torch.load(SWEEP / case / "expected.pt", weights_only=True)
    dynamic = "calls" in expected  # a case built with --dynamic (package sweep_CASE_dyn): each size it was checked at
    model = import_package(f"sweep_{case}_dyn" if dynamic else f"sweep_{case}").load("cuda")
    for size in expected["calls"] if dynamic else [expected]:
        _check_calls(case, model, size)


def _check_calls(case: str, model, expected: dict) -> None:
    limits = expected.get("limits") or [None if not t.is_floating_point() else TOLERANCE[t.dtype]
                                        for t in expected["outputs"]]
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in expected["inputs"]]
    shapes = [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)]
    for call in range(3):  # op by op, then the graph captured at the second call, then its replay
        got = [t for t in _pytree.tree_leaves(model(*inputs)) if isinstance(t, torch.Tensor)]
        assert len(got) == len(expected["outputs"]), f"{case}: {len(got)} outputs, eager {len(expected['outputs'])}"
        for i, (mine, ref) in enumerate(zip(got, expected["outputs"])):
            same_dtype = mine.dtype == ref.dtype or ref.is_floating_point() and "limits" in expected  # 16-bit
            assert mine.shape == ref.shape and same_dtype, f"{case} output {i}: {mine.shape}/{mine.dtype}"
            if ref.is_floating_point():
                error = relative_error(mine.cpu(), ref)
                assert error <= limits[i], \
                    f"{case} at {shapes}, call {call}, output {i}: relative L2 {error:.2e} > {limits[i]:.1e}"
            else:
                assert torch.equal(mine.cpu(), ref), f"{case} at {shapes}, call {call}, output {i} differs"
