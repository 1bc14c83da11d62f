"""The zoo of real models on a GPU: every package matches eager on fresh inputs, in graph mode
and op by op, with the package's weights in both (tolerances: aotcombo.testing.zoo)."""

import os

import pytest
import torch

from aotcombo.testing.gpu import import_package
from aotcombo.testing.zoo import ZOO, as_float32, assert_all_ok, check, eager_model, fresh_inputs, package_name

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("full_fp32")]

SEEDS = (101, 202)  # the build used seed 0


# The zoo reaches the GPU machine in two transfers (64 MiB each): AOTCOMBO_ZOO names the models
# whose packages came with this one (scripts/gpu_check.sh), MODEL@BATCH for one built at another
# batch size (scripts/build_zoo.py MODEL@BATCH).
CHECKED = tuple(os.environ["AOTCOMBO_ZOO"].split()) if os.environ.get("AOTCOMBO_ZOO") else ZOO


@pytest.fixture(scope="module", params=CHECKED)
def zoo(request):
    name = request.param
    package = import_package(package_name(name))
    try:
        return name, package, eager_model(name, package)
    except ImportError as exc:  # the model's library (e.g. diffusers) is not on this machine
        pytest.skip(f"{name}: the eager model needs {exc.name or exc}, not installed here: carry its wheel "
                    "(README, GPU check)")


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_zoo_model_matches_eager(zoo, graphs):
    name, package, eager = zoo
    loaded = package.load("cuda", graphs=graphs)
    report = []
    for seed in SEEDS:
        inputs = fresh_inputs(name, seed)
        with torch.no_grad():
            ref = eager(*inputs)
            low = any(p.dtype in (torch.bfloat16, torch.float16) for p in eager.parameters())
            reference = None
            if low:
                model32, inputs32 = as_float32(eager, inputs)
                reference = model32(*inputs32)
        got = loaded(*inputs)
        assert type(got) is type(ref) or isinstance(got, dict) and isinstance(ref, dict), (type(got), type(ref))
        rows = check(got, ref, reference)
        report += [{"model": name, "graphs": graphs, "seed": seed, **row} for row in rows]
    assert_all_ok(report, "zoo_check.jsonl")
