"""A functional AdamW step over many tensors of very different sizes (fp32).

Exercises a "foreach"-style workload: the same short chain of pointwise ops
applied to ``n_tensors`` independent tensors whose numels are spread
geometrically from ``min_numel`` to ``max_numel``. Inputs are the flat tuple
``(params..., grads..., exp_avgs..., exp_avg_sqs...)``; outputs are
``(new params..., new exp_avgs..., new exp_avg_sqs...)``, computed out of place.
"""

import torch
from torch import nn

LR = 1e-3
BETA1, BETA2 = 0.9, 0.999
EPS = 1e-8
WEIGHT_DECAY = 0.01
STEP = 10
BIAS_CORRECTION1 = 1 - BETA1**STEP
BIAS_CORRECTION2 = 1 - BETA2**STEP


def _numels(n_tensors, min_numel, max_numel):
    if n_tensors == 1:
        return [min_numel]
    ratio = (max_numel / min_numel) ** (1 / (n_tensors - 1))
    return [round(min_numel * ratio**i) for i in range(n_tensors)]


class AdamStep(nn.Module):
    def forward(self, *tensors):
        n = len(tensors) // 4
        params, grads, exp_avgs, exp_avg_sqs = (tensors[i * n:(i + 1) * n] for i in range(4))
        new_p, new_m, new_v = [], [], []
        for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
            m = m * BETA1 + g * (1 - BETA1)
            v = v * BETA2 + g * g * (1 - BETA2)
            denom = (v / BIAS_CORRECTION2).sqrt() + EPS
            p = p * (1 - LR * WEIGHT_DECAY) - (LR / BIAS_CORRECTION1) * m / denom
            new_p.append(p)
            new_m.append(m)
            new_v.append(v)
        return (*new_p, *new_m, *new_v)


def get_model(n_tensors=64, min_numel=1000, max_numel=1_000_000, dtype=torch.float32):
    torch.manual_seed(0)
    return AdamStep().to(dtype)


def get_example_inputs(n_tensors=64, min_numel=1000, max_numel=1_000_000, dtype=torch.float32):
    gen = torch.Generator().manual_seed(1)
    numels = _numels(n_tensors, min_numel, max_numel)

    def randn_all():
        return [torch.randn(n, generator=gen).to(dtype) for n in numels]

    params, grads, exp_avgs = randn_all(), randn_all(), randn_all()
    exp_avg_sqs = [(t * 0.1) ** 2 for t in randn_all()]  # non-negative
    return (*params, *grads, *exp_avgs, *exp_avg_sqs)
