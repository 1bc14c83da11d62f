"""Tensor parallel (``build --tensor-parallel N``): the model as one rank of N sees it, before the trace."""
