"""The wrapper the full-size causal LMs share (imported by the model files next to it)."""

from torch import nn


class Logits(nn.Module):
    """A transformers causal LM called without a key/value cache, returning its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False).logits
