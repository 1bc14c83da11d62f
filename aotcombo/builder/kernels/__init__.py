"""Kernels of ours, a folder per family: the rewrite before Inductor that marks the work
(``match``, ``combine``), what it computes (``recipe``), the lowering after the trace into a
``graph.Kernel`` with ``family`` set, and its template in ``templates/``.

- ``linear/``: linears of one input combined (``combine``); a small matmul with the norm before
  and the pointwise ops after it, or a decode step's GEMV, as one kernel (``match``, ``recipe``,
  ``lowering``; ``fused_linear.py.j2``); weights the model dequantizes from int8 or packed int4
  bytes and scales (``quant_match``, ``quant``; torchao's subclasses first made plain tensors,
  ``subclasses``), read as bytes by a decode step's fused linears.
- ``attention/``: attention of a few query rows over many keys (an LLM decode step) split over
  the keys, or a small one in one kernel (``lowering``; ``decode_attention.py.j2``); in a size
  class of a few tokens, with its sizes given at run time (``dynamic``); a decode step's rotary
  embedding and cache write done by its attention kernel (``rope_fold``; the forms read, ``rope_patterns``).
- ``conv/``: no kernel of ours: a convolution's BatchNorm folded into its weights and its bias,
  residual and ReLU in cuDNN's epilogue (``cudnn_epilogue``), a call the program makes.
"""

from __future__ import annotations

from .. import graph as g
from .attention import lowering as attention_lowering
from .linear import lowering as linear_lowering


def lower(graph: g.Graph, max_tokens: int | None = None) -> g.Graph:
    """The traced graph with the calls we make our own kernels for replaced by them, and
    without the weights nothing reads (``max_tokens``: the size class the graph was traced for)."""
    return g.without_unread_weights(attention_lowering.lower(linear_lowering.lower(graph), max_tokens))
