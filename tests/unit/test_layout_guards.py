"""Nearest upsampling of a tensor whose channel dim is a dynamic axis (DETR's ``mask[None]``: the
batch) builds for the whole range (``trace/layout_guards.py``: torch's decomposition guarded on
the channel count to pick a layout), and a static build's program is the same with or without
the change; without it, the error names the model's line. Tolerance: relative L2 <= 1e-5
against eager (fp32, under Triton's interpreter)."""

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import entry, layout_guards
from aotcombo.errors import UnsupportedModelError
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret


class MaskedFeatures(nn.Module):
    """A conv's features and a pixel mask brought to their size, as DETR's backbone does."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)

    def forward(self, pixels, mask):
        features = self.conv(pixels)
        small = F.interpolate(mask[None].float(), size=features.shape[-2:]).to(torch.bool)[0]
        return features.masked_fill(~small[:, None], 0.0), F.interpolate(features, scale_factor=2.0)


def _inputs(batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, 16, 16, dtype=torch.bool)
    for b in range(batch):
        mask[b, :, int(torch.randint(4, 17, (1,), generator=g)):] = False
    return torch.randn(batch, 3, 16, 16, generator=g), mask


def test_a_mask_upsampled_with_the_batch_as_channels_builds_for_every_batch(tmp_path):
    torch.manual_seed(0)
    model = MaskedFeatures().eval()
    result = build_package(model, _inputs(2, 0), arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                           shapes=Dynamic(batch=(1, 8)))
    for batch in (1, 4, 5, 8):  # 4 and more: where torch's decomposition guarded batch < 4
        inputs = _inputs(batch, batch)
        with torch.no_grad():
            want = model(*inputs)
        got = interpret.run_variant(result, 0, inputs)
        for g, w in zip(got, want):
            assert relative_error(g, w) <= 1e-5


def test_a_static_program_is_the_same_with_or_without_it(tmp_path, monkeypatch):
    model = MaskedFeatures().eval()
    example = _inputs(4, 0)
    now = build_package(model, example, arch=["sm_90"], out=tmp_path / "now", cache=False, jobs=1)
    monkeypatch.setattr(entry, "upsample_without_channel_guard", nullcontext)
    before = build_package(model, example, arch=["sm_90"], out=tmp_path / "before", cache=False, jobs=1)
    assert now.variants[0].program == before.variants[0].program


def test_without_it_the_error_names_the_models_line(tmp_path, monkeypatch):
    """A guard torch's own code adds on the virtual GPU (draft_export on the CPU never adds it) is
    found where the export added it: the error names the model's line."""
    monkeypatch.setattr(entry, "upsample_without_channel_guard", nullcontext)
    with pytest.raises(UnsupportedModelError, match=r"batch in 1\.\.8: the model needs batch <= 3 at "
                                                    r"test_layout_guards\.py:\d+ \(`small = F\.interpolate"):
        build_package(MaskedFeatures().eval(), _inputs(2, 0), arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                      shapes=Dynamic(batch=(1, 8)))


def test_a_guard_added_while_compiling_names_the_models_line(tmp_path, monkeypatch):
    """The same guard, added only while compiling (the change kept to the export): refused after the
    compile (``specialization``), naming torch's frame and the model's line of the op compiled."""
    export = entry.export_on_fake_gpu

    def export_with_it(*args, **kwargs):
        with layout_guards.upsample_without_channel_guard():
            return export(*args, **kwargs)

    monkeypatch.setattr(entry, "upsample_without_channel_guard", nullcontext)
    monkeypatch.setattr(entry, "export_on_fake_gpu", export_with_it)
    with pytest.raises(UnsupportedModelError, match=r"assumed s\d+ < 4 at decompositions\.py:\d+ in _upsample_nearest, "
                                                    r"for the model at test_layout_guards\.py:\d+ \(`small = "):
        build_package(MaskedFeatures().eval(), _inputs(2, 0), arch=["sm_90"], out=tmp_path, cache=False, jobs=1,
                      shapes=Dynamic(batch=(1, 8)))
