"""24 independent elementwise + layer-norm branches (bf16).

Exercises horizontal fusion: each branch is ``layer_norm(gelu(x_i * w_i + b_i))``
on its own input of shape ``[rows, base + step * i]``, so the graph holds many
small, independent pointwise+reduction kernels of different widths that a
combo kernel can launch together.
"""

import torch
import torch.nn.functional as F
from torch import nn


def _widths(n_branches, base, step):
    return [base + step * i for i in range(n_branches)]


class Branches(nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.weights = nn.ParameterList(nn.Parameter(torch.randn(w) * 0.5 + 1.0) for w in widths)
        self.biases = nn.ParameterList(nn.Parameter(torch.randn(w) * 0.1) for w in widths)

    def forward(self, *xs):
        outs = []
        for x, w, b in zip(xs, self.weights, self.biases):
            y = F.gelu(x * w + b)
            outs.append(F.layer_norm(y, (y.shape[-1],)))
        return tuple(outs)


def get_model(n_branches=24, rows=64, base=256, step=32, dtype=torch.bfloat16):
    torch.manual_seed(0)
    return Branches(_widths(n_branches, base, step)).to(dtype)


def get_example_inputs(n_branches=24, rows=64, base=256, step=32, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(1)
    return tuple(torch.randn(rows, w, generator=gen).to(dtype) for w in _widths(n_branches, base, step))
