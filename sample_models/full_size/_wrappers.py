"""The wrappers the full-size causal LMs share (imported by the model files next to them)."""

import contextlib

import torch
from torch import nn


class Logits(nn.Module):
    """A transformers causal LM called without a key/value cache, returning its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits


class CacheStep(nn.Module):
    """A decode step of transformers' ``TorchExportableModuleWithStaticCache``:
    ``forward(input_ids, cache_position)``, without its ``inputs_embeds``."""

    def __init__(self, exportable):
        super().__init__()
        self.exportable = exportable

    def forward(self, input_ids, cache_position):
        return self.exportable(input_ids=input_ids, cache_position=cache_position)


@contextlib.contextmanager
def parameters_on_meta():
    """Modules made inside have their parameters on the meta device (shapes and dtypes, no
    bytes, no initialisation cost) and their buffers where torch puts them (the CPU): what
    accelerate's ``init_empty_weights(include_buffers=False)`` does. A build with
    ``--weights external`` needs no more: the weights come at load time, while the buffers
    outside the ``state_dict`` (a static cache, rotary frequencies) are packaged."""
    register = nn.Module.register_parameter

    def on_meta(module, name, param):
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


@contextlib.contextmanager
def default_dtype(dtype):
    """Parameters made in ``dtype`` from the start: 8B in float32 first would be 32 GB."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
