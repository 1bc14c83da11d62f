"""Dynamic axes in size classes: a build with ``--dynamic batch=1:4,seq=1:16`` traces a second
program for calls of at most ``FEW_TOKENS`` tokens, whose linears are kernels of ours sized for
that many rows and reading the rows at run time. Both programs checked under the interpreter
against eager on fresh random inputs at sizes across each class, the manifest's classes, and the
runtime's choice of class."""

import pytest
import torch
from torch import nn

from aotcombo.builder.kernels.linear.dynamic_rows import (FEW_TOKENS, FEW_TOKENS_MAX_WEIGHT_BYTES, rows_bound,
                                                         size_classes)
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.runtime.size_classes import SizeClasses
from aotcombo.tools import interpret
from aotcombo.tools.inspection.contents import inspect_package
from aotcombo.tools.inspection.text import format_text


class Block(nn.Module):
    """A transformer's MLP half: LayerNorm, up with GELU, down, the residual."""

    def __init__(self, hidden: int = 128, inner: int = 512):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(hidden), nn.Linear(hidden, inner), nn.Linear(inner, hidden)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.manual_seed(0)
    model = Block().eval()
    result = build_package(model, (torch.randn(2, 5, 128),), arch=["sm_90"], name="classes",
                           out=tmp_path_factory.mktemp("classes"), shapes=Dynamic(batch=(1, 4), seq=(1, 16)),
                           dynamic_axes={"x": {0: "batch", 1: "seq"}}, cache=False, jobs=1)
    return model, result


def test_a_program_for_few_tokens_and_one_for_every_size(built):
    _, result = built
    assert [v.max_tokens for v in result.variants] == [None, FEW_TOKENS]
    assert [s.max_tokens for s in result.manifest.specializations] == [FEW_TOKENS, None]
    assert result.manifest.size_classes == (FEW_TOKENS,)
    general, few = (v.plan.graph.kernels for v in result.variants)
    assert not any(k.family == "fused_linear" for k in general)
    fused = [k for k in few if k.family == "fused_linear"]
    assert fused and all(("m_size", "i32") in k.signature and "rm < m_size" in k.source for k in fused)


def test_inspect_and_the_build_line_show_the_class(built):
    _, result = built
    few = result.summary()["size_classes"]
    assert list(few) == [FEW_TOKENS] and few[FEW_TOKENS] > 0
    report = format_text(inspect_package(result.wheel))
    assert f"calls of up to {FEW_TOKENS} tokens" in report and f"{few[FEW_TOKENS]} launches per forward" in report
    assert "batch None" not in report  # one memory figure: the program for every size's


@pytest.mark.parametrize("variant, sizes", [(1, [(1, 1), (1, 7), (2, 4), (4, 2), (1, 8)]),
                                            (0, [(1, 9), (3, 5), (4, 16)])])
def test_each_class_matches_eager(built, variant, sizes):
    model, result = built
    generator = torch.Generator().manual_seed(variant)
    for batch, seq in sizes:
        x = torch.randn(batch, seq, 128, generator=generator)
        got = interpret.run_variant(result, variant, (x,))
        with torch.no_grad():
            ref = model(x)
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)  # float32, products in tf32x3


def test_large_weights_stay_cublas_and_the_class_is_dropped(tmp_path):
    model = Block(hidden=1024, inner=2048).eval()  # 8 MB weights: over FEW_TOKENS_MAX_WEIGHT_BYTES
    assert 1024 * 2048 * 4 > FEW_TOKENS_MAX_WEIGHT_BYTES
    result = build_package(model, (torch.randn(2, 5, 1024),), arch=["sm_90"], name="large", out=tmp_path,
                           shapes=Dynamic(batch=(1, 4), seq=(1, 16)), dynamic_axes={"x": {0: "batch", 1: "seq"}},
                           cache=False, jobs=1)
    assert [v.max_tokens for v in result.variants] == [None] and len(result.manifest.specializations) == 1


def test_rows_bound_reads_products_of_axes():
    import torch.fx.experimental.symbolic_shapes as shapes
    env = shapes.ShapeEnv()
    a, b = (env.create_unbacked_symint() for _ in range(2))
    assert rows_bound(a * b, 8) == 8 and rows_bound(3 * a, 8) == 24 and rows_bound(a, None) is None
    assert rows_bound(a * a, 8) is None and rows_bound(a + 1, 8) is None


def test_size_classes_rule():
    assert size_classes(None) == (None,)
    assert size_classes(Dynamic(batch=(1, 32), seq=(1, 512))) == (None, FEW_TOKENS)
    assert size_classes(Dynamic(1, FEW_TOKENS)) == (FEW_TOKENS,)  # every call a few tokens: one program
    assert size_classes(Dynamic(batch=(2, 4), seq=(8, 64))) == (None,)  # none is


class _Named:
    def __init__(self, name):
        self.name, self.device, self.names, self.mutated = name, "cpu", ["x"], ()

    def __call__(self, *inputs):
        return self.name


def test_the_runtime_runs_the_class_of_a_calls_tokens():
    model = SizeClasses([(FEW_TOKENS, _Named("few"))], _Named("rest"), where=((0, 0), (0, 1)))
    assert model(torch.empty(1, 7, 3)) == "few" and model(torch.empty(2, 4, 3)) == "few"
    assert model(torch.empty(1, 9, 3)) == "rest" and model(x=torch.empty(3, 3, 3)) == "rest"
    assert model("not a tensor") == "rest"  # its input check names the problem


class Encoder(nn.Module):
    """A BERT-like layer: fused q/k/v, attention under a padding mask, output projection, norm."""

    def __init__(self, hidden: int = 256, heads: int = 4):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x, mask):
        b, s, hidden = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        keep = mask[:, None, None, :].bool()
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.norm(x + self.out(a.transpose(1, 2).reshape(b, s, hidden)))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    torch.manual_seed(1)
    model = Encoder().eval()
    example = (torch.randn(2, 5, 256), torch.ones(2, 5, dtype=torch.int64))
    result = build_package(model, example, arch=["sm_90"], name="classes_attention",
                           out=tmp_path_factory.mktemp("classes_attention"),
                           shapes=Dynamic(batch=(1, 4), seq=(1, 16)),
                           dynamic_axes={"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}},
                           cache=False, jobs=1)
    return model, result


def test_the_few_token_class_runs_attention_in_a_kernel_of_ours(encoder):
    model, result = encoder
    general, few = result.variants
    assert any(op.op == "aten::scaled_dot_product_attention" for op in general.plan.ops
               if hasattr(op, "op") and isinstance(op.op, str))
    assert not any(getattr(op, "op", None) == "aten::scaled_dot_product_attention" for op in few.plan.ops)
    assert any(k.family == "decode_attention" and ("batch", "i32") in k.signature for k in few.plan.graph.kernels)
    generator = torch.Generator().manual_seed(3)
    for batch, seq in [(1, 1), (1, 7), (2, 4), (4, 2), (1, 8), (3, 2)]:
        x = torch.randn(batch, seq, 256, generator=generator)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        mask[1:, seq // 2 + 1:] = 0  # rows after the first padded
        got = interpret.run_variant(result, 1, (x, mask))
        with torch.no_grad():
            ref = model(x, mask)
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
