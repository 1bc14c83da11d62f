"""What the zoo's tests share (test_zoo, test_zoo_attention, test_zoo_model_io,
test_zoo_decompositions): the zoo's model files with the library each needs, and ``check``,
a package's outputs against eager's.

Tolerances: relative L2 error (||got - eager|| / ||eager||, ``aotcombo.testing.compare``) <= 1e-4
for fp32 outputs, 1e-2 for bf16/fp16 ones.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree
from aotcombo.testing import zoo
from aotcombo.testing.compare import relative_error

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def check(got, ref) -> list[float]:
    """Every output leaf has eager's shape, dtype and values (within TOLERANCE), in eager's
    structure (a transformers ModelOutput comes back as a dict); returns the errors."""
    if any(c.__name__ == "ModelOutput" for c in type(ref).__mro__):
        ref = dict(ref)
    got_leaves, got_spec = _pytree.tree_flatten(got)
    ref_leaves, ref_spec = _pytree.tree_flatten(ref)
    assert got_spec == ref_spec
    errors = []
    for g, r in zip(got_leaves, ref_leaves):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        if not r.is_floating_point():
            assert torch.equal(g, r)
            continue
        err = relative_error(g, r)  # raises on an all-zero eager output: the comparison would prove nothing
        assert err <= TOLERANCE[r.dtype], err
        errors.append(err)
    return errors


# model -> the library its file needs (None: torch only).
NEEDS = {
    "bert": "transformers", "gpt2": "transformers", "gpt2_block": "transformers", "llama": "transformers",
    "qwen2": "transformers", "t5_encoder": "transformers", "whisper_encoder": "transformers",
    "vit_tiny": "timm", "swin": "timm", "convnext": "timm",
    "resnet50": "torchvision", "mobilenet_v3_small": "torchvision", "efficientnet_b0": "torchvision",
    "diffusers_unet": "diffusers", "diffusers_vae_decoder": "diffusers",
    "unet_stage": None, "moe": None, "dlrm": None, "llama_block": None,
    "gpt_neox": "transformers", "phi": "transformers", "bart": "transformers", "deberta_v2": "transformers",
    "falcon": "transformers", "bloom": "transformers", "segformer": "transformers",
    "mobilevit": "timm", "maxvit": "torchvision",
    "lraspp_mobilenet_v3": "torchvision",
}


def load_zoo(name: str):
    if NEEDS[name]:
        pytest.importorskip(NEEDS[name])
    return zoo.model_file(name)
