"""Full-size models on a GPU (sample_models/full_size/: BERT-base, GPT-2 small, a Llama 3.2 1B
prefill and decode step, ViT-B/16, ResNet-50 at 224): the sizes users serve, where tiles, reductions and the
matmul rules take other paths than the zoo's small configs reach. Built here with
``--weights external`` (scripts/gpu_check.sh installs them from .carry/full/*): on the GPU the
model is made again from its file and its own ``state_dict()`` is given to ``load``, so no
weights travel. Each matches eager on fresh inputs (two seeds; the build used seed 0), in graph
mode and op by op; low-precision outputs within max(1e-2, 2 x eager's own error) of float32
eager (aotcombo.testing.zoo.check). A decode step (a file with ``MAX_CACHE``) also runs ``STEPS`` steps
from an empty cache, each step's logits checked so, and the cache after them.
"""

import os

import pytest
import torch

from aotcombo.testing.gpu import import_package
from aotcombo.testing.zoo import (FULL_SIZE, FULL_SIZE_DIR, as_float32, assert_all_ok, check, check_decode_steps,
                                  model_file)

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("full_fp32")]

CHECKED = tuple(os.environ["AOTCOMBO_FULL_SIZE"].split()) if os.environ.get("AOTCOMBO_FULL_SIZE") else FULL_SIZE
SEEDS = (101, 202)
STEPS = 8
DECODERS = tuple(name for name in CHECKED if hasattr(model_file(name, FULL_SIZE_DIR), "MAX_CACHE"))


@pytest.fixture(scope="module", params=[name for name in CHECKED if name not in DECODERS])
def full_size(request):
    name = request.param
    source = model_file(name, FULL_SIZE_DIR)
    for module in getattr(source, "REQUIRES", ()):  # sd_unet: diffusers, whose wheel the GPU machine needs carried
        pytest.importorskip(module)
    package = import_package(f"full_{name}")
    return name, source, package, source.get_model(device="cuda")


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_full_size_model_matches_eager(full_size, graphs):
    name, source, package, eager = full_size
    loaded = package.load("cuda", graphs=graphs, weights=eager.state_dict())
    report = []
    for seed in SEEDS:
        inputs = tuple(t.cuda() for t in source.get_example_inputs(seed=seed))
        with torch.no_grad():
            ref = eager(*inputs)
            model32, inputs32 = as_float32(eager, inputs)
            reference = model32(*inputs32)
            del model32
        for call in range(2):  # in graph mode: the call that captures, then a replay
            rows = check(loaded(*inputs), ref, reference)
            report += [{"model": name, "graphs": graphs, "seed": seed, "call": call, **row} for row in rows]
    assert_all_ok(report, "full_size_check.jsonl")


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
@pytest.mark.parametrize("name", DECODERS)
def test_full_size_decode_steps_match_eager(name, graphs):
    source = model_file(name, FULL_SIZE_DIR)
    eager = source.get_model(device="cuda")
    model32 = source.get_model(dtype=torch.float32, device="cuda")  # not a copy: the cache holds its tensors itself
    model32.load_state_dict({key: value.float() if value.is_floating_point() else value
                             for key, value in eager.state_dict().items()})
    loaded = import_package(f"full_{name}").load("cuda", graphs=graphs, weights=eager.state_dict())
    assert_all_ok(check_decode_steps(source, loaded, eager, model32, STEPS, model=name, graphs=graphs),
                  "full_size_check.jsonl")
