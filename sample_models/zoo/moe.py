"""A mixture-of-experts feed-forward layer with top-2 routing, hand-written, fp32.

8 experts (SwiGLU, 128 -> 256 -> 128), a linear router, softmax, top-2 with the
two weights renormalised (Mixtral style). Written without data-dependent
shapes: every expert runs on every token (batched matmuls over stacked expert
weights), and the routing weights are scattered into a dense [tokens, experts]
matrix (zero for unrouted experts) that combines the experts' outputs. Same
result as dispatching tokens, at 4x the FLOPs; no host syncs.
Input: hidden states [2, 32, 128]; a residual add and RMSNorm around the layer.
"""

import torch
import torch.nn.functional as F
from torch import nn


class MoE(nn.Module):
    def __init__(self, dim=128, hidden=256, experts=8, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.norm_weight = nn.Parameter(torch.randn(dim) * 0.1 + 1)
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_gate = nn.Parameter(torch.randn(experts, dim, hidden) / dim**0.5)
        self.w_up = nn.Parameter(torch.randn(experts, dim, hidden) / dim**0.5)
        self.w_down = nn.Parameter(torch.randn(experts, hidden, dim) / hidden**0.5)

    def forward(self, x):
        b, t, d = x.shape
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        tokens = h.reshape(b * t, d)
        probs = F.softmax(self.router(tokens), dim=-1)  # [T, E]
        top_w, top_i = probs.topk(self.top_k, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        gates = torch.zeros_like(probs).scatter(1, top_i, top_w)  # [T, E], two nonzeros per row
        # Every expert on every token: [E, T, hidden] -> [E, T, d].
        xe = tokens.unsqueeze(0).expand(self.w_gate.shape[0], -1, -1)
        act = F.silu(torch.bmm(xe, self.w_gate)) * torch.bmm(xe, self.w_up)
        out = torch.bmm(act, self.w_down)
        combined = torch.einsum("te,etd->td", gates, out)
        return x + combined.reshape(b, t, d), top_i


def get_model():
    torch.manual_seed(0)
    return MoE().eval()


def get_example_inputs(batch=2, seq=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, seq, 128, generator=g),)
