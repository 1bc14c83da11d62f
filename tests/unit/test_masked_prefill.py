"""A prefill under a key mask (one row of keys per batch: an encoder's padding) as a kernel of ours
that skips the padded key blocks (``kernels/attention/prefill.py``), the mask proven a key mask
from the ops that build it (``trace/mask_rows.py``); masks that vary by query stay torch's.

Built for sm_90 and run under Triton's interpreter on fresh random inputs, against the same
model in float64; float16, relative L2 <= 1e-2 (fp16 rounding of unit-scale inputs)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from aotcombo import Dynamic
from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace.mask_rows import mask_fact
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

BATCH, HEADS, SEQ, DIM = 2, 2, 160, 64  # 160 keys: past a small attention's 128, a tail block of 32


class KeyMasked(nn.Module):
    """q, k, v given; a [batch, 1, 1, keys] mask (bool, or additive)."""

    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Encoder(nn.Module):
    """transformers' way: the 2-D padding mask broadcast against ``q_idx >= 0`` (or, ``causal``,
    ``kv_idx <= q_idx``) into a [batch, 1, queries, keys] boolean mask."""

    def __init__(self, causal: bool = False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, attention_mask):
        b, _, s, _ = q.shape
        rows = torch.arange(s, device=q.device)[None, None, :, None] + 0  # + the cache's offset, as transformers
        keys = torch.arange(s, device=q.device)[None, None, None, :] + 0
        visible = keys <= rows if self.causal else rows >= 0
        batches = torch.arange(b, device=q.device)[:, None, None, None]
        mask = (visible & attention_mask.bool()[batches, keys]).expand(b, -1, s, s)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class Projected(nn.Module):
    """q, k, v from one linear of the hidden states (as an encoder layer makes them), then ``Encoder``."""

    def __init__(self):
        super().__init__()
        self.qkv, self.attend = nn.Linear(HEADS * DIM, 3 * HEADS * DIM), Encoder()

    def forward(self, x, attention_mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, DIM).permute(2, 0, 3, 1, 4)
        return self.attend(q, k, v, attention_mask)


def _qkv(batch: int, seq: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, HEADS, seq, DIM, generator=generator).half() for _ in range(3)]


def _padding(batch: int, seq: int) -> torch.Tensor:
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for i in range(1, batch):  # every batch after the first padded after a different length
        mask[i, max(1, seq * (4 - i) // 5):] = 0
    return mask


def _ours(result, variant: int = 0) -> list[g.Kernel]:
    plan = result.variants[variant].plan
    return [s.kernel for c in plan.combos for s in c.subs if s.kernel.name.startswith("attention_masked_prefill")]


def _torch_attention(result, variant: int = 0) -> list[str]:
    return [op.op for op in result.variants[variant].plan.ops if isinstance(op, g.Extern) and "attention" in op.op]


def _expected(model, inputs):
    return model(*[t.double() if t.is_floating_point() else t for t in inputs])


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_a_key_mask_input_is_ours_and_matches_eager(tmp_path, kind):
    def mask(batch):
        keep = _padding(batch, SEQ).bool()[:, None, None, :]
        return keep if kind == "bool" else torch.where(keep, 0.0, float("-inf")).half()

    result = build_package(KeyMasked(), [*_qkv(BATCH, SEQ, 0), mask(BATCH)], arch=["sm_90"], out=tmp_path,
                           cache=False)
    assert len(_ours(result)) == 1 and not _torch_attention(result)
    inputs = [*_qkv(BATCH, SEQ, 3), mask(BATCH)]
    assert relative_error(interpret.run_variant(result, 0, inputs), _expected(KeyMasked(), inputs)) <= 1e-2


def test_a_bool_key_mask_of_any_pattern_matches_eager(tmp_path):
    """The kernel reads a bool mask whose visible keys are one run (a padding mask's) only at the
    run's ends, by the keys' indices, and any other mask a block at a time: left padding, one run in
    the middle of the keys, keys scattered, and one batch of each kind."""
    keys = torch.arange(SEQ)
    scattered = torch.rand(BATCH, SEQ, generator=torch.Generator().manual_seed(11)) > 0.4
    patterns = {"left": (keys >= 37).expand(BATCH, SEQ), "middle": ((keys >= 40) & (keys < 121)).expand(BATCH, SEQ),
                "scattered": scattered, "mixed": torch.stack([keys >= 37, scattered[1]])}
    result = build_package(KeyMasked(), [*_qkv(BATCH, SEQ, 0), _padding(BATCH, SEQ).bool()[:, None, None, :]],
                           arch=["sm_90"], out=tmp_path, cache=False)
    assert len(_ours(result)) == 1
    for name, keep in patterns.items():
        inputs = [*_qkv(BATCH, SEQ, 7), keep[:, None, None, :].contiguous()]
        error = relative_error(interpret.run_variant(result, 0, inputs), _expected(KeyMasked(), inputs))
        assert error <= 1e-2, (name, error)


def test_transformers_padding_mask_is_proven_a_key_mask(tmp_path):
    inputs = [*_qkv(BATCH, SEQ, 0), _padding(BATCH, SEQ)]
    result = build_package(Encoder(), inputs, arch=["sm_90"], out=tmp_path, cache=False)
    assert len(_ours(result)) == 1 and not _torch_attention(result)
    inputs = [*_qkv(BATCH, SEQ, 5), _padding(BATCH, SEQ)]
    assert relative_error(interpret.run_variant(result, 0, inputs), _expected(Encoder(), inputs)) <= 1e-2


def test_masks_that_vary_by_query_stay_torchs(tmp_path):
    causal = build_package(Encoder(causal=True), [*_qkv(BATCH, SEQ, 0), _padding(BATCH, SEQ)], arch=["sm_90"],
                           out=tmp_path / "causal", cache=False)
    full = torch.rand(BATCH, 1, SEQ, SEQ) > 0.3
    given = build_package(KeyMasked(), [*_qkv(BATCH, SEQ, 0), full], arch=["sm_90"], out=tmp_path / "full",
                          cache=False)
    for result in (causal, given):
        assert not _ours(result) and _torch_attention(result)


def test_one_program_serves_every_batch_and_length(tmp_path):
    """Dynamic batch and length: the kernel takes its sizes and its grid at run time."""
    torch.manual_seed(0)
    model = Projected().half().eval()

    def inputs(batch, seq):
        x = torch.randn(batch, seq, HEADS * DIM, generator=torch.Generator().manual_seed(batch * seq)).half()
        return [x, _padding(batch, seq)]

    result = build_package(model, inputs(2, 40), arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                           shapes=Dynamic(batch=(1, 3), seq=(1, 200)),
                           dynamic_axes={"x": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}})
    general = [i for i, v in enumerate(result.variants) if v.max_tokens is None][0]
    (kernel,) = _ours(result, general)
    assert kernel.dynamic_numels == ("x",) and ("keys", "i32") in kernel.signature
    assert {"q_stride0", "out_stride0"} <= set(kernel.divisible_by_16)  # multiples of 16 at any size
    for batch, seq in [(1, 9), (2, 77), (3, 129), (1, 200), (3, 64), (2, 128)]:
        given = inputs(batch, seq)
        got = interpret.run_variant(result, general, given)
        assert got.shape == (batch, HEADS, seq, DIM)
        with torch.no_grad():
            expected = model.double()(given[0].double(), given[1])
            model.half()
        assert relative_error(got, expected) <= 1e-2, (batch, seq)


def _fact(model: nn.Module, *inputs):
    graph = torch.export.export(model, inputs).run_decompositions({}).graph  # as the build sees it
    (output,) = [n for n in graph.nodes if n.op == "output"]
    return mask_fact(output.args[0][0])


def test_the_proof():
    """``q_idx >= 0`` is true whatever the input, so only the padding row varies; ``kv_idx <= q_idx``
    varies by query."""

    class Build(nn.Module):
        def __init__(self, causal):
            super().__init__()
            self.causal = causal

        def forward(self, attention_mask):
            s = attention_mask.shape[1]
            rows = torch.arange(s)[None, None, :, None]
            keys = torch.arange(s)[None, None, None, :]
            visible = keys <= rows if self.causal else rows >= 0
            return visible & attention_mask.bool()[torch.arange(attention_mask.shape[0])[:, None, None, None], keys]

    mask = _padding(2, 8)
    assert _fact(Build(False), mask).varies == {0, 3}
    assert _fact(Build(True), mask).varies == {0, 2, 3}

    class Cast(nn.Module):
        """``(q_idx + 5).bool() >= 5`` is False (True is 1): the or is the causal mask's."""

        def forward(self, attention_mask):
            s = attention_mask.shape[1]
            rows, keys = torch.arange(s)[None, None, :, None], torch.arange(s)[None, None, None, :]
            return (((rows + 5).bool() >= 5) | (keys <= rows)) & attention_mask.bool()[:, None, None, :]

    assert 2 in _fact(Cast(), mask).varies
