"""torch.export and TorchInductor on a virtual GPU, read into ``graph.Graph``; every use of
torch's private API in the builder (``entry.trace_model`` is the way in, ``cached`` the stage)."""
