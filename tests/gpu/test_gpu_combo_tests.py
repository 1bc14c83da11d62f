"""PyTorch's combo-kernel tests on a GPU: every ported case (``combo_test_models``), built here
at the PyTorch test's own sizes (``scripts/build_combo_tests.py``; ``GPU_SMALL`` ones, too large to
carry, at their interpreter size), matches eager on fresh
random inputs, in graph mode and op by op: outputs and the inputs the model updates in place,
fp32 within 1e-4 relative L2, integer outputs exact, strides as eager's."""

import pytest
import torch

from aotcombo.testing import combo as S
from aotcombo.testing.corpora import combo_test_models
from aotcombo.testing.gpu import import_package
from aotcombo.testing.zoo import package_weights

M = combo_test_models()

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("full_fp32")]



def eager_model(name: str, package) -> torch.nn.Module:
    case = M.CASES[name]
    model = ((case.small_model or case.model) if name in S.GPU_SMALL else case.model)().eval()
    own = dict(model.named_parameters()) | dict(model.named_buffers())
    with torch.no_grad():
        for key, value in package_weights(package).items():
            if key in own:
                own[key].copy_(value)
    return model.cuda()


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
@pytest.mark.parametrize("name", list(M.CASES))
def test_case_matches_eager(name, graphs):
    case = M.CASES[name]
    package = import_package(S.package_name(name))
    eager = eager_model(name, package)
    loaded = package.load("cuda", graphs=graphs)
    for seed in S.CHECK_SEEDS:
        for batch in case.check_batches or [None]:
            if case.dynamic:
                inputs = case.inputs(seed, batch)
            else:
                inputs = (case.small if name in S.GPU_SMALL else case.inputs)(seed)
            mine = [S.clone_exact(t, "cuda") for t in inputs]
            theirs = [S.clone_exact(t, "cuda") for t in inputs]
            with torch.no_grad():
                ref = eager(*theirs)
            got = loaded(*mine)
            torch.cuda.synchronize()
            S.worst_error(got, ref)
            S.worst_error(tuple(mine), tuple(theirs))  # in-place updates, as in eager
