"""``quantized_decode.py``'s decode step with plain bf16 ``nn.Linear`` layers, quantized by
torchao's own ``quantize_`` (``pip install 'aotcombo[quant]'``, build time only; the package
runs with torch alone). One model function per config:

- ``get_int8_weight_only_model``: ``Int8WeightOnlyConfig()`` (int8, a scale per output channel);
- ``get_int4_weight_only_model``: ``IntxWeightOnlyConfig(weight_dtype=torch.int4,
  granularity=PerGroup(128))``, torchao's int4 that runs anywhere (``Int4WeightOnlyConfig``'s
  default format needs the ``mslk`` package and its tile-packed one a GPU to quantize on);
- ``get_int8_dynamic_model``: ``Int8DynamicActivationInt8WeightConfig()`` (x quantized per call);
- ``get_float8_dynamic_model``: ``Float8DynamicActivationFloat8WeightConfig(granularity=PerRow())``
  (sm_89 or later: build with ``--arch sm_90``);
- ``get_float_model``: the same weights unquantized (the reference the errors are taken against).

::

    aotcombo build sample_models/torchao_decode.py --model-fn get_int8_weight_only_model \\
        --batch 1,16,64 --arch sm_80,sm_90 --name torchao_int8_weight_only
"""

from contextlib import nullcontext
from unittest import mock

import torch
from quantized_decode import _model, get_example_inputs  # noqa: F401 (the inputs are quantized_decode's)


def get_float_model():
    return _model(16)


def _quantized(config_name: str, **options):
    from torchao import quantization
    from torchao.quantization import quant_api

    model = _model(16)
    config = getattr(quantization, config_name)(**options)
    # torchao asks for an sm_89+ GPU before it makes float8 weights; a build machine has none
    skip_check = mock.patch.object(quant_api, "_check_hardware_support", lambda granularity: None)
    with nullcontext() if torch.cuda.is_available() else skip_check:
        quantization.quantize_(model, config)
    return model


def get_int8_weight_only_model():
    return _quantized("Int8WeightOnlyConfig")


def get_int4_weight_only_model():
    from torchao.quantization.granularity import PerGroup

    return _quantized("IntxWeightOnlyConfig", weight_dtype=torch.int4, granularity=PerGroup(128))


def get_int8_dynamic_model():
    return _quantized("Int8DynamicActivationInt8WeightConfig")


def get_float8_dynamic_model():
    from torchao.quantization.granularity import PerRow

    return _quantized("Float8DynamicActivationFloat8WeightConfig", granularity=PerRow())
