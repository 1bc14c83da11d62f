"""Batch buckets: the shape options, per-size example inputs, the padding check, the runtime's
bucket dispatch (with stand-in bucket models on the CPU), and a bucketed build whose every
bucket runs under the interpreter and matches eager."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from aotcombo.tools import interpret
from aotcombo.builder.inputs import shapes
from aotcombo.errors import UsageError
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.inputs import options
from aotcombo.runtime.buckets import BucketedModel, lookup_table
from aotcombo.runtime.manifest import Buckets, Dynamic

ROOT = Path(__file__).resolve().parents[2]


def test_parse_batch_and_dynamic():
    assert options.parse_batch("8, 1,2,2") == Buckets((1, 2, 8))
    assert options.parse_batch([4, 2], pad=True) == Buckets((2, 4), pad=True)
    for bad in ("", "1,x", "0", "1,-4", "70000"):
        with pytest.raises(UsageError):
            options.parse_batch(bad)
    assert options.parse_dynamic("batch=1:256") == Dynamic(1, 256)
    assert options.parse_dynamic("batch") == Dynamic(1, options.MAX_BATCH)
    assert options.parse_dynamic("batch=1:8, seq=2:512") == Dynamic(batch=(1, 8), seq=(2, 512))
    for bad in ("", "batch=4:1", "batch=0:3", "batch=1-4", "batch=1:1", "seq=1:4,seq=1:8", "1seq=1:4"):
        with pytest.raises(UsageError):
            options.parse_dynamic(bad)


def test_lookup_table():
    assert lookup_table([2, 4], pad=False) == [0, 0, 2, 0, 4]
    assert lookup_table([2, 4], pad=True) == [0, 2, 2, 4, 4]


def test_cut_or_tile_keeps_example_rows():
    x, w = torch.arange(6.0).reshape(3, 2), torch.ones(5)
    small, same = shapes.cut_or_tile((x, w), [0], 2)
    assert torch.equal(small, x[:2]) and same is w
    big, _ = shapes.cut_or_tile((x, w), [0], 7)
    assert big.shape == (7, 2) and torch.equal(big[3:6], x) and torch.equal(big[6], x[0])


def test_batched_inputs_found_and_checked():
    by_size, batched = shapes.example_inputs_by_size(
        (), [2, 4], lambda b: (torch.randn(b, 3), torch.randn(3), torch.randn(b)))
    assert batched == [0, 2] and sorted(by_size) == [2, 4] and by_size[4][0].shape == (4, 3)
    with pytest.raises(UsageError, match="not as dim 0"):
        shapes.example_inputs_by_size((), [2, 4], lambda b: (torch.randn(3, b),))
    with pytest.raises(UsageError, match="no example input changes"):
        shapes.example_inputs_by_size((), [2, 4], lambda b: (torch.randn(3),))
    # without make(): the inputs whose dim 0 equals the first input's
    _, batched = shapes.example_inputs_by_size((torch.randn(5, 2), torch.randn(7), torch.randn(5)), [1, 2], None)
    assert batched == [0, 2]


class RowWise(nn.Module):
    def forward(self, x, bias):
        return torch.softmax(x, dim=-1) + bias, x.sum()  # the second output is not batched


class MixesRows(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=0)


def _run(model):
    def run(inputs):
        out = model(*inputs)
        return list(out) if isinstance(out, tuple) else [out]

    return run


def test_padding_check_accepts_row_wise_models_and_rejects_others():
    make = lambda b: (torch.randn(b, 6, generator=torch.Generator().manual_seed(b)), torch.randn(6))  # noqa: E731
    by_size, batched = shapes.example_inputs_by_size((), [2, 4], make)
    assert shapes.check_padding(_run(RowWise()), by_size, batched) == [0]
    by_size, batched = shapes.example_inputs_by_size((), [2, 4], lambda b: (torch.randn(b, 6),))
    with pytest.raises(UsageError, match="mixes rows"):
        shapes.check_padding(_run(MixesRows()), by_size, batched)


class _FakeBucket:
    """A bucket model on the CPU: checks its batch size, runs RowWise, updates input 2 in place."""

    def __init__(self, size):
        self.size, self.mutated, self.calls = size, (2,), 0

    def __call__(self, x, bias, counter):
        assert x.shape[0] == self.size and counter.shape[0] == self.size
        self.calls += 1
        counter += 1
        return {"y": torch.softmax(x, -1) + bias, "total": x.sum()}


def _bucketed(pad):
    loaded = {}
    batch = Buckets((2, 4), pad, batched_inputs=(0, 2), batched_outputs=(0,))  # leaves: y, total
    model = BucketedModel("m", torch.device("cpu"), lambda s: loaded.setdefault(s, _FakeBucket(s)), batch,
                          ["x", "bias", "counter"])
    return model, loaded


def test_bucketed_model_dispatches_by_batch_size():
    model, loaded = _bucketed(pad=False)
    x, bias = torch.randn(4, 6), torch.randn(6)
    out = model(x, bias, torch.zeros(4))
    assert list(loaded) == [4] and torch.allclose(out["y"], torch.softmax(x, -1) + bias)
    model(torch.randn(2, 6), bias, torch.zeros(2))
    assert sorted(loaded) == [2, 4]
    for n in (3, 5, 0):
        with pytest.raises(ValueError, match=f"batch size {n} is not one this package was built for"):
            model(torch.randn(n, 6), bias, torch.zeros(n))
    with pytest.raises(TypeError, match="dim 0 is the batch"):
        model(torch.tensor(1.0), bias, torch.zeros(1))


def test_bucketed_model_pads_between_buckets():
    model, loaded = _bucketed(pad=True)
    x, bias, counter = torch.randn(3, 6), torch.randn(6), torch.zeros(3)
    out = model(x, bias, counter)
    assert list(loaded) == [4] and out["y"].shape == (3, 6)
    assert torch.allclose(out["y"], torch.softmax(x, -1) + bias)
    assert torch.equal(counter, torch.ones(3))  # the in-place update reached the caller's rows
    with pytest.raises(ValueError, match="sizes 1 to 4 run"):
        model(torch.randn(5, 6), bias, torch.zeros(5))
    with pytest.raises(ValueError, match="inputs sharing the batch axis must agree"):
        model(torch.randn(3, 6), bias, torch.zeros(2))
    model.warm_up()
    assert sorted(loaded) == [2, 4]


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x, scale):
        h = torch.nn.functional.layer_norm(torch.relu(self.lin(x)) * scale, (16,))
        return h, x.sum(dim=-1)


def test_bucketed_build_matches_eager_in_every_bucket(tmp_path):
    torch.manual_seed(0)
    model = Small().eval()
    make = lambda b: (torch.randn(b, 8, 16), torch.rand(16) + 0.5)  # noqa: E731
    result = build_package(model, make(4), arch=["sm_90"], name="small", out=tmp_path,
                           shapes=Buckets((1, 3, 4), pad=True), make_inputs=make, cache=False, jobs=1)
    m = result.manifest
    kernels = [k for s in m.specializations for v in s.variants.values() for k in v.kernels]
    assert len(kernels) == sum(len(v.plan.combos) for v in result.variants)  # a cubin each (sm_90a: no PTX)
    by_image = {}
    for k in kernels:  # images stored once by content: one path, one digest
        assert by_image.setdefault(k.image, k.sha256) == k.sha256
    assert len(set(by_image.values())) == len(by_image)
    assert m.shapes == Buckets((1, 3, 4), pad=True, batched_inputs=(0,), batched_outputs=(0, 1))
    assert [s.batch for s in m.specializations] == [1, 3, 4] and m.inputs[0].shape == (4, 8, 16)
    assert [v.batch for v in result.variants] == [1, 3, 4]
    for index, variant in enumerate(result.variants):
        inputs = make(variant.batch)
        assert m.specialization(variant.batch).inputs[0].shape == (variant.batch, 8, 16)
        got = interpret.run_variant(result, index, inputs)
        with torch.no_grad():
            ref = model(*inputs)
        for g, r in zip(got, ref):
            assert g.shape == r.shape and torch.allclose(g, r, rtol=1e-4, atol=1e-4)


def test_cli_rejects_padding_a_model_that_mixes_rows(tmp_path):
    model_file = tmp_path / "mixes.py"
    model_file.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.softmax(x, dim=0)\n"
        "def get_model():\n    return M()\n"
        "def get_example_inputs(batch=4):\n    return (torch.randn(batch, 8),)\n")
    out = tmp_path / "dist"
    run = subprocess.run([sys.executable, "-m", "aotcombo", "build", str(model_file), "--batch", "2,4", "--pad",
                          "--arch", "sm_90", "--out", str(out), "--no-cache"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2, run.stderr
    assert "mixes rows" in run.stderr and "without --pad" in run.stderr and not out.exists()
    run = subprocess.run([sys.executable, "-m", "aotcombo", "build", str(model_file), "--pad", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and "--pad needs --batch" in run.stderr


class _FakeSeqBucket:
    """A bucket model over a sequence axis (dim 1 of ids and mask): sums the masked rows."""

    def __init__(self, size):
        self.size, self.mutated = size, ()

    def __call__(self, ids, mask):
        assert ids.shape[1] == self.size and mask.shape[1] == self.size
        return (ids * mask)[:, :, None].float().expand(-1, -1, 3), (ids * mask).sum(1)


def test_buckets_on_a_named_axis_pad_and_cut_along_it():
    loaded = {}
    seq = Buckets((4, 8), True, axis="seq", dims=((0, 1), (1, 1)), out_dims=((0, 1),))
    model = BucketedModel("m", torch.device("cpu"), lambda s: loaded.setdefault(s, _FakeSeqBucket(s)), seq,
                          ["ids", "mask"])
    ids, mask = torch.randint(1, 9, (2, 5)), torch.ones(2, 5, dtype=torch.int64)
    hidden, total = model(ids, mask)
    assert list(loaded) == [8] and hidden.shape == (2, 5, 3) and torch.equal(total, ids.sum(1))
    assert torch.equal(hidden[:, :, 0], ids.float())
    with pytest.raises(ValueError, match=r"'mask'\): seq size 4, but input 0 has 5: inputs sharing the seq axis"):
        model(ids, mask[:, :4])
    with pytest.raises(ValueError, match=r"seq size 9 is not one this package was built for .* --buckets seq=SIZES"):
        model(torch.ones(2, 9, dtype=torch.int64), torch.ones(2, 9, dtype=torch.int64))
    assert options.parse_buckets("seq=8,4", pad=True) == Buckets((4, 8), True, axis="seq")
    assert options.parse_buckets("batch=2,1") == Buckets((1, 2))
    with pytest.raises(UsageError, match="not of the form AXIS=SIZE"):
        options.parse_buckets("8,16")
