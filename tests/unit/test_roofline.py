"""scripts/roofline.py: a forward's bytes (weights once, a tied table once, an embedding table only for
the rows gathered, inputs and outputs) and FLOPs, counted in the model's dtype, on the CPU or meta."""

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import roofline  # noqa: E402


class TinyLM(nn.Module):
    def __init__(self, vocab=1000, d=64, tied=True):
        super().__init__()
        self.embed, self.proj, self.head = nn.Embedding(vocab, d), nn.Linear(d, d), nn.Linear(d, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.proj(self.embed(ids)))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bytes_and_flops(tied, device):
    vocab, d, tokens = 1000, 64, 12
    with torch.device(device):  # made there: moved to meta afterwards, a tied weight comes untied
        model = TinyLM(vocab, d, tied).to(torch.bfloat16)
    moved, flops, dtype = roofline.forward_cost(model, [torch.randint(0, vocab, (1, tokens), device=device)])
    weights = (d * d + d + vocab * d) * 2  # proj, the head (the table itself where tied)
    gathered = 0 if tied else tokens * d * 2  # an untied table: only the rows looked up
    io = tokens * 8 + tokens * vocab * 2  # int64 ids in, bf16 logits out
    assert dtype == torch.bfloat16 and moved == weights + gathered + io
    assert flops == 2 * tokens * d * (d + vocab)


def test_floor_takes_the_larger_term():
    assert roofline.floor_us(3e9, 1e9, torch.float16, 3e12) == pytest.approx(1000.0)  # memory: 1 ms
    assert roofline.floor_us(1e6, 989e9, torch.float16, 3e12) == pytest.approx(1000.0)  # compute: 1 ms
