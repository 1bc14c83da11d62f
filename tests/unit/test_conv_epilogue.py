"""A convolution's BatchNorm folded into its weights and its bias, residual and ReLU in cuDNN's
epilogue (``kernels/conv/cudnn_epilogue.py``): which chains become one ``fused_conv`` call, that
the folding runs at load, and the package against eager under the interpreter (fp16 model,
float32 reference: within max(1e-2, 1.5 x eager's own error) in relative L2)."""

import pytest
import torch
from torch import nn

from aotcombo.builder import graph as g
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret


def _bn(channels, g):
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.weight.normal_(1.0, 0.2, generator=g)
        bn.bias.normal_(0.0, 0.2, generator=g)
        bn.running_mean.normal_(0.0, 0.2, generator=g)
        bn.running_var.uniform_(0.5, 2.0, generator=g)
    return bn


class Blocks(nn.Module):
    """A stem (conv, BatchNorm, ReLU: fused), a block whose shortcut is a BatchNorm'd 1x1 conv
    (fused into the block's last call), a block with the identity as residual (fused), a conv
    with a bias (folded too), a BatchNorm'd conv without ReLU (left as it is: no epilogue to
    gain) and a grouped 3x3 conv whose BatchNorm output has a second use (left as it is)."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.stem, self.stem_bn = nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), _bn(16, gen)
        self.a1, self.a1_bn = nn.Conv2d(16, 32, 3, padding=1, bias=False), _bn(32, gen)
        self.a2, self.a2_bn = nn.Conv2d(32, 32, 1, bias=True), _bn(32, gen)
        self.down, self.down_bn = nn.Conv2d(16, 32, 1, bias=False), _bn(32, gen)
        self.b1, self.b1_bn = nn.Conv2d(32, 32, 3, padding=1, bias=False), _bn(32, gen)
        self.plain, self.plain_bn = nn.Conv2d(32, 32, 1, bias=False), _bn(32, gen)
        self.grouped, self.grouped_bn = nn.Conv2d(32, 32, 3, padding=1, groups=4, bias=False), _bn(32, gen)

    def forward(self, x):
        x = torch.relu(self.stem_bn(self.stem(x)))
        y = torch.relu(self.a1_bn(self.a1(x)))
        x = torch.relu(self.a2_bn(self.a2(y)) + self.down_bn(self.down(x)))
        x = torch.relu(self.b1_bn(self.b1(x)) + x)
        p = self.plain_bn(self.plain(x))
        q = self.grouped_bn(self.grouped(x))
        return torch.relu(q) + q + p


def _fused_calls(plan) -> list[g.Extern]:
    return [op for op in plan.call_ops if isinstance(op, g.Extern) and op.op == "aotcombo::fused_conv.default"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    model = Blocks().half().eval()
    example = (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)).half(),)
    return model, build_package(model, example, arch=["sm_90"], name="conv_epilogue",
                                 out=tmp_path_factory.mktemp("dist"), cache=False, native=False)


def test_chains_become_one_cudnn_call_each(built):
    _, result = built
    plan = result.variants[0].plan
    calls = _fused_calls(plan)
    # stem, a1, a2 with the shortcut's bare conv as its residual, b1 with the identity
    relu = [op for op in calls if op.args[-1] is True]
    bare = [op for op in calls if op.args[-1] is False]
    assert len(relu) == 4 and len(bare) == 1
    assert sum(op.args[3] is not None for op in relu) == 2  # two residuals
    assert bare[0].args[2] is None  # the shortcut's bias went into the block's call
    convs = [op for op in plan.call_ops if isinstance(op, g.Extern) and "convolution" in op.op]
    assert len(convs) == 2  # the conv without ReLU and the grouped one whose BatchNorm is used twice
    assert plan.load is not None and plan.load.launches >= 1  # the folding: once, at load
    assert "fused_conv" in result.variants[0].program


def _channels_last(spec) -> bool:
    n, c, h, w = spec.shape
    return all(size == 1 or stride == want for size, stride, want in
               zip(spec.shape, spec.stride, (h * w * c, 1, w * c, c)))


def test_each_call_reads_its_input_and_weight_channels_last(built):
    """cuDNN's NHWC kernels read them as they are: no copy of either per call (a weight made at
    load keeps that layout; the model's channels-first input is copied once, by a kernel of ours)."""
    _, result = built
    plan = result.variants[0].plan
    spec = plan.graph.spec
    for op in _fused_calls(plan):
        x, weight = op.args[0].name, op.args[1].name
        assert _channels_last(spec[x]) and _channels_last(spec[weight]), (x, spec[x], weight, spec[weight])
    stem = _fused_calls(plan)[0]  # the image's 3 channels padded to 4 (cuDNN's first-layer kernel), once
    assert spec[stem.args[0].name].shape[1] == 4 and spec[stem.args[1].name].shape[1] == 4


def _check(model, result, batches, dtype):
    for seed, batch in enumerate(batches, start=2):
        x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed)).to(dtype)
        with torch.no_grad():
            want = model(x)
            exact = Blocks().eval()
            exact.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
            exact = exact(x.float())
        got = interpret.run_variant(result, 0, [x.clone()])
        assert got.dtype == want.dtype and got.shape == want.shape
        eager_error = relative_error(want, exact)
        assert relative_error(got, exact) <= max(1e-2, 1.5 * eager_error), (relative_error(got, exact), eager_error)


def test_matches_eager_under_the_interpreter(built):
    _check(*built, batches=(2, 2), dtype=torch.float16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_dynamic_batch_matches_eager(dtype, tmp_path):
    """bf16 too; the batch a dynamic axis (the fake values the pass remakes are symbolic)."""
    model = Blocks().to(dtype).eval()
    example = (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dtype),)
    result = build_package(model, example, arch=["sm_90"], name="conv_dynamic", out=tmp_path, cache=False,
                           native=False, shapes=Dynamic(1, 8))
    assert len(_fused_calls(result.variants[0].plan)) == 5
    _check(model, result, batches=(1, 5), dtype=dtype)


class TwoInputs(nn.Module):
    """The convolution reads the first of two inputs, the second scales its output."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1, bias=False), _bn(8, torch.Generator().manual_seed(5))

    def forward(self, x, scale):
        return torch.relu(self.bn(self.conv(x))) * scale


def test_a_conv_of_the_first_of_two_inputs(tmp_path):
    model = TwoInputs().half().eval()
    g = torch.Generator().manual_seed(6)
    inputs = (torch.randn(2, 3, 16, 16, generator=g).half(), torch.rand(8, 1, 1, generator=g).half())
    result = build_package(model, inputs, arch=["sm_90"], name="conv_two", out=tmp_path, cache=False, native=False)
    assert len(_fused_calls(result.variants[0].plan)) == 1
    with torch.no_grad():
        want = model(*inputs)
    assert relative_error(interpret.run_variant(result, 0, [t.clone() for t in inputs]), want) <= 1e-2


def test_float32_convolutions_are_left_to_inductor(tmp_path):
    model = Blocks().eval()
    result = build_package(model, (torch.randn(2, 3, 32, 32),), arch=["sm_90"], name="conv_fp32", out=tmp_path,
                           cache=False, native=False)
    assert _fused_calls(result.variants[0].plan) == []
