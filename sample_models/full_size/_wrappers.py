"""The wrappers the full-size causal LMs share (imported by the model files next to them)."""

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
