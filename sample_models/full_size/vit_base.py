"""ViT-B/16 (timm ``vit_base_patch16_224``: 12 layers, width 768, 12 heads, 1000 classes; 86M
parameters) at 224x224 in fp16. Eight images; random weights, built with ``--weights external``.

``get_float8_model``: the blocks' linears quantized by torchao (float8 weights and per-call float8
activations, per row; bf16), against ``get_bf16_model`` (benchmarks/float8_bench.py)::

    aotcombo build sample_models/full_size/vit_base.py --name full_vit_base_fp8 --model-fn get_float8_model \\
        --inputs-fn get_bf16_example_inputs --weights external --arch sm_90
"""

import contextlib
from unittest import mock

import torch


def get_model(dtype=torch.float16, device="cpu"):
    import timm

    torch.manual_seed(0)
    return timm.create_model("vit_base_patch16_224", pretrained=False).to(dtype).to(device).eval()


def get_example_inputs(batch=8, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, 224, 224, generator=g).to(dtype),)


def get_bf16_model(device="cpu"):
    """``get_model`` in bf16: the baseline ``get_float8_model`` is measured against (torchao's per-row float8
    takes bf16 weights only). Inputs: ``get_bf16_example_inputs``."""
    return get_model(dtype=torch.bfloat16, device=device)


def get_bf16_example_inputs(batch=8, seed=0):
    return get_example_inputs(batch=batch, seed=seed, dtype=torch.bfloat16)


def get_float8_model(dtype=torch.bfloat16, device="cpu"):
    """``get_model`` with torchao's ``Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())`` on the
    transformer blocks' linears (qkv, proj, fc1, fc2: float8 weights with a scale per output channel, x quantized
    per row at each call). bf16: torchao's per-row float8 takes bf16 weights only (fp16 is an AssertionError).
    The patch embedding's conv and the head (1000 outputs, not a multiple of 16 as ``_scaled_mm`` needs) stay
    as they are. Needs torchao; the package needs sm_89 or later (``--arch sm_90``). Inputs:
    ``get_bf16_example_inputs``."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, quant_api, quantize_
    from torchao.quantization.granularity import PerRow

    model = get_model(dtype=dtype, device=device)
    config = Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())
    in_blocks = lambda module, name: isinstance(module, torch.nn.Linear) and name.startswith("blocks.")  # noqa: E731
    # torchao asks for an sm_89+ GPU before making float8 weights; a GPU-less build machine makes them on the CPU.
    skip = mock.patch.object(quant_api, "_check_hardware_support", lambda granularity: None)
    with skip if not torch.cuda.is_available() else contextlib.nullcontext():
        quantize_(model, config, filter_fn=in_blocks)
    return model
