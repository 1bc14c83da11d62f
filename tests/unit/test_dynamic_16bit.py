"""A program for dynamic axes in 16 bits assumes nothing of the lengths. The bfloat16 sweep with
``--dynamic`` (``scripts/model_sweep.py``) found the linear rewrite reading a tensor of as many
elements as a product, its last dim the length, as the product's width: a guard ``Ne(seq, 32)``,
which the build refused (Gemma 2, DeBERTa). The model builds for lengths 1-32 and matches float32
eager under the interpreter within max(1e-2, 2 x bfloat16 eager's own error)."""

import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import leaves, relative_error
from aotcombo.tools import interpret

RANGES = Dynamic(batch=(1, 4), seq=(1, 32))


class TransposedProduct(nn.Module):
    """A linear of 32 features whose output is read transposed: [batch, 32, seq]."""

    def __init__(self):
        super().__init__()
        self.embed, self.linear = nn.Embedding(100, 32), nn.Linear(32, 32)

    def forward(self, input_ids):
        return self.linear(self.embed(input_ids)).transpose(1, 2) * 2.0


def _check(model, example, axes, sizes, tmp_path):
    torch.manual_seed(0)
    reference = model.eval()
    half = type(model)().eval()
    half.load_state_dict(reference.state_dict())
    half = half.to(torch.bfloat16)
    result = build_package(half, example, arch=["sm_90"], out=tmp_path, cache=False, jobs=1, shapes=RANGES,
                           dynamic_axes=axes)
    for batch, seq in sizes:
        g = torch.Generator().manual_seed(seq)
        ids = torch.randint(0, 100, (batch, seq), generator=g)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[1:, seq // 2 + 1:] = 0  # rows after the first padded
        inputs = (ids, mask)[:len(example)]
        with torch.no_grad():
            want = reference(*inputs).float()
            limit = max(1e-2, 2 * relative_error(half(*inputs).float(), want))
        variants = [i for i, v in enumerate(result.variants) if v.max_tokens is None or batch * seq <= v.max_tokens]
        for variant in variants:
            got = leaves(interpret.run_variant(result, variant, inputs))[0]
            assert relative_error(got.float(), want) <= limit, (batch, seq, variant)


def test_a_product_read_transposed_builds_for_every_length(tmp_path):
    torch.manual_seed(0)
    example = (torch.randint(0, 100, (2, 16)),)
    _check(TransposedProduct(), example, {"input_ids": {0: "batch", 1: "seq"}}, ((1, 3), (2, 7), (3, 32)),
           tmp_path)

