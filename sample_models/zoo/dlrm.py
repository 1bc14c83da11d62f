"""A DLRM-style recommender, hand-written, fp32.

13 dense features through a bottom MLP (13 -> 64 -> 16); 26 sparse features,
each a bag of ids looked up in its own ``nn.EmbeddingBag(mode="sum")`` table
(100 to 2600 rows of 16) from a flat id list and per-sample offsets (bags of
different lengths, one empty); the pairwise dot products of the 27 feature
vectors (the strict upper triangle, 351 values, gathered with a fixed index
buffer) concatenated with the dense vector into a top MLP (367 -> 64 -> 1) and
a sigmoid. Inputs: dense [batch, 13], ids [26, lookups], offsets [26, batch].
"""

import torch
from torch import nn

TABLES = 26
DIM = 16
LOOKUPS_PER_SAMPLE = 3


class DLRM(nn.Module):
    def __init__(self):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(13, 64), nn.ReLU(), nn.Linear(64, DIM), nn.ReLU())
        self.tables = nn.ModuleList(nn.EmbeddingBag(100 * (i + 1), DIM, mode="sum") for i in range(TABLES))
        n = TABLES + 1
        rows, cols = torch.triu_indices(n, n, offset=1)
        self.register_buffer("pairs", rows * n + cols)
        self.top = nn.Sequential(nn.Linear(DIM + n * (n - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, dense, ids, offsets):
        x = self.bottom(dense)  # [B, D]
        sparse = [table(ids[i], offsets[i]) for i, table in enumerate(self.tables)]  # 26 x [B, D]
        features = torch.stack([x] + sparse, dim=1)  # [B, 27, D]
        dots = torch.bmm(features, features.transpose(1, 2)).flatten(1)  # [B, 27 * 27]
        z = torch.cat([x, dots[:, self.pairs]], dim=1)
        return torch.sigmoid(self.top(z))


def get_model():
    torch.manual_seed(0)
    return DLRM().eval()


def get_example_inputs(batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    dense = torch.rand(batch, 13, generator=g)
    lookups = batch * LOOKUPS_PER_SAMPLE
    ids = torch.stack([torch.randint(0, 100 * (i + 1), (lookups,), generator=g) for i in range(TABLES)])
    # Bag lengths vary (0 to 2 * LOOKUPS_PER_SAMPLE); offsets are each bag's start.
    lengths = torch.full((batch,), LOOKUPS_PER_SAMPLE)
    lengths[0], lengths[-1] = 0, 2 * LOOKUPS_PER_SAMPLE
    starts = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)[:-1]])
    return dense, ids, starts.expand(TABLES, batch).contiguous()
