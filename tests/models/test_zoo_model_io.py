"""What the zoo's models take and give, packaged as they are: a transformers model's input
names and ModelOutput, extern outputs in the layout the plan expects, CPU literals made in
forward, an OrderedDict output, and a transformers cache made in forward (an error naming the
fix); each matching eager under Triton's interpreter (tolerances: ``_zoo_helpers``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from aotcombo.tools import interpret
from aotcombo.errors import UnsupportedModelError
from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error

from _zoo_helpers import check


# --- a transformers model as it is: its names, its ModelOutput ------------------------


def test_transformers_model_keeps_its_names_and_output_keys(tmp_path):
    """A BertModel packaged without a wrapper: the inputs are named after forward's
    parameters (input_ids, attention_mask) and the ModelOutput comes back as a dict with
    its keys, values within 1e-4 (fp32) of eager."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=16, attn_implementation="sdpa")
    model = transformers.BertModel(config).eval()
    g = torch.Generator().manual_seed(0)
    example = (torch.randint(0, 100, (2, 8), generator=g), torch.ones(2, 8, dtype=torch.int64))
    result = build_package(model, example, arch=["sm_90"], out=tmp_path / "dist", cache=False)
    assert [i.name for i in result.manifest.inputs] == ["input_ids", "attention_mask"]
    inputs = (torch.randint(0, 100, (2, 8), generator=g), torch.tensor([[1] * 8, [1] * 5 + [0] * 3]))
    with torch.no_grad():
        ref = model(*inputs)
    got = interpret.run_variant(result, 0, list(inputs))
    assert isinstance(got, dict) and list(got) == list(ref.keys()) == ["last_hidden_state", "pooler_output"]
    check(list(got.values()), list(ref.values()))


def test_extern_outputs_come_in_the_planned_layout(tmp_path):
    """SegFormer's decode head: per-stage linears, bilinear upsampling, concat, then 1x1
    convolutions of a channels-last tensor, whose output layout the backend picks at run
    time (on the CPU another than the trace planned, so the next kernel read it through the
    wrong strides: 1.2 from eager). The program copies such outputs into the planned
    layout where they differ. Within 1e-5 of eager (fp32)."""
    import torch.nn.functional as F

    class DecodeHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 32)])
            self.fuse, self.classifier = nn.Conv2d(64, 32, 1, bias=False), nn.Conv2d(32, 5, 1)

        def forward(self, a, b):
            stages = []
            for t, proj in zip((a, b), self.proj):
                h, w = t.shape[2:]
                t = proj(t.flatten(2).transpose(1, 2)).transpose(1, 2).reshape(t.shape[0], -1, h, w)
                stages.append(F.interpolate(t, size=a.shape[2:], mode="bilinear", align_corners=False))
            return self.classifier(torch.relu(self.fuse(torch.cat(stages[::-1], dim=1))))

    def inputs():
        return torch.randn(2, 16, 16, 16), torch.randn(2, 32, 8, 8)

    torch.manual_seed(0)
    model = DecodeHead().eval()
    result = build_package(model, inputs(), arch=["sm_90"], out=tmp_path / "dist", cache=False)
    x = inputs()
    with torch.no_grad():
        ref = model(*x)
    assert relative_error(interpret.run_variant(result, 0, list(x)), ref) <= 1e-5


def test_cpu_literals_in_forward_run_on_the_gpu(tmp_path):
    """DeBERTa's and Falcon's ways: tensor literals made in ``forward`` on the CPU (a
    log-bucket scale, ``torch.tensor(n).type_as(x)``, a sqrt of a literal, an index list
    ``x[:, [-2]]``) combined with GPU tensors. They used to need a real GPU while tracing
    (a literal moved by ``type_as`` or by indexing) or CPU kernels (math on literals); now
    they move to the GPU. Within 1e-5 of eager (fp32)."""

    class Literals(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            scale = torch.sqrt(torch.tensor(16, dtype=torch.float) * 3)
            bucket = torch.log(torch.tensor(63.0)) / torch.log(torch.tensor(8.0))
            floor = torch.tensor(3).type_as(x)
            y = torch.maximum(self.proj(x) / scale * bucket, floor)
            return y[:, :-2] * y[:, [-2]] + y[:, [-1]]

    torch.manual_seed(0)
    model = Literals().eval()
    result = build_package(model, (torch.randn(4, 16),), arch=["sm_90"], out=tmp_path / "dist", cache=False)
    x = torch.randn(4, 16) * 20
    with torch.no_grad():
        ref = model(x)
    got = interpret.run_variant(result, 0, [x])
    assert relative_error(got, ref) <= 1e-5


def test_ordered_dict_output_comes_back_as_one(tmp_path):
    """torchvision's segmentation models return ``OrderedDict(out=..., aux=...)``: the package
    returns an OrderedDict with the same keys in the same order, values within 1e-4 (fp32)."""
    from collections import OrderedDict

    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.out, self.aux = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 1), nn.Conv2d(8, 2, 1)

        def forward(self, x):
            features = torch.relu(self.body(x))
            return OrderedDict([("out", self.out(features)), ("aux", self.aux(features).sigmoid())])

    torch.manual_seed(0)
    model = Heads().eval()
    result = build_package(model, (torch.randn(2, 3, 16, 16),), arch=["sm_90"], out=tmp_path / "dist", cache=False)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        ref = model(x)
    got = interpret.run_variant(result, 0, [x])
    assert type(got) is OrderedDict and list(got) == ["out", "aux"]
    check(list(got.values()), list(ref.values()))


def test_a_transformers_model_with_use_cache_on_gets_the_fix_named(tmp_path):
    """A decoder built with transformers' defaults (use_cache=True) makes a DynamicCache in forward
    and returns it; the error names the model and the fix (use_cache=False, or a StaticCache),
    not the virtual GPU's "no NVIDIA driver"."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, use_cache=True)).eval()
    with pytest.raises(UnsupportedModelError) as info:
        build_package(model, (torch.randint(0, 64, (1, 8)),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "LlamaModel makes a transformers cache" in message and "use_cache=False" in message, message
    assert "StaticCache" in message and not (tmp_path / "out").exists()
    model.config.use_cache = False  # the fix named: it builds
    assert build_package(model, (torch.randint(0, 64, (1, 8)),), arch=["sm_90"], out=tmp_path / "fixed",
                         cache=False).wheels
