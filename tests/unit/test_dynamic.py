"""A dynamic batch (``--dynamic batch=MIN:MAX``): kernels compiled once take the sizes that
depend on the batch as arguments and the program computes every grid per call. Checked
here under the interpreter against eager at several sizes, plus the input guards, the
manifest and the option errors."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from aotcombo.tools import interpret
from aotcombo.errors import UsageError
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.inputs import check_inputs, make_input_check
from aotcombo.runtime.manifest import Buckets, Dynamic

from aotcombo.testing import manifests

ROOT = Path(__file__).resolve().parents[2]


class Mixed(nn.Module):
    """Pointwise, a row reduction, a matmul and a reduction across the batch."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(24, 24)

    def forward(self, x, bias):
        h = torch.nn.functional.gelu(self.lin(x)) + bias
        h = torch.nn.functional.layer_norm(h, (24,))
        return h, x.sum(dim=0), torch.softmax(x, dim=-1).transpose(0, 1).contiguous()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    torch.manual_seed(0)
    model = Mixed().eval()
    make = lambda b: (torch.randn(b, 5, 24), torch.randn(24))  # noqa: E731
    result = build_package(model, make(4), arch=["sm_90"], name="mixed", out=tmp_path_factory.mktemp("dyn"),
                           shapes=Dynamic(1, 300), make_inputs=make, cache=False, jobs=1)
    return model, make, result


def test_manifest_describes_the_dynamic_batch(built):
    _, _, result = built
    m = result.manifest
    assert m.shapes == Dynamic(1, 300, batched_inputs=(0,))
    assert m.inputs[0].shape == ("batch", 5, 24) and m.inputs[1].shape == (24,)
    kernels = m.specialization().variants["sm_90"].kernels
    assert any(k.dynamic_grid for k in kernels)
    assert all(k.params and set(k.params) <= {"ptr", "i32", "i64"} for k in kernels)
    assert len(m.specializations) == 1


@pytest.mark.parametrize("batch", [1, 2, 7, 300])
def test_interpreted_dynamic_package_matches_eager(built, batch):
    model, make, result = built
    inputs = make(batch)
    got = interpret.run_variant(result, 0, inputs)
    with torch.no_grad():
        ref = model(*inputs)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and torch.allclose(g, r, rtol=1e-4, atol=1e-4)


def test_program_computes_grids_from_the_batch(built):
    _, _, result = built
    program = result.variants[0].program
    assert ".shape[0]" in program
    # every launch of a dynamic combo passes its grid first: an expression, not a literal
    launches = [line.strip() for line in program.splitlines() if line.strip().startswith("kernels[")]
    assert launches and any(not line.split("(", 1)[1].split(",")[0].strip().isdigit() for line in launches)


def _specs():
    return manifests.specs(
        {"name": "x", "dtype": "float32", "shape": ["batch", 5, 24], "stride": [120, 24, 1], "align": 16},
        {"name": "mask", "dtype": "float32", "shape": ["batch"], "stride": [1], "align": 16},
        {"name": "bias", "dtype": "float32", "shape": [24], "stride": [1], "align": 16},
    )


def test_dynamic_guard_checks_shape_range_and_agreement():
    specs, device = _specs(), torch.device("cpu")
    guard = make_input_check(specs, device, {"batch": (1, 8)})
    guard((torch.randn(3, 5, 24), torch.randn(3), torch.randn(24)))
    guard((torch.randn(8, 5, 24), torch.randn(8), torch.randn(24)))
    with pytest.raises(ValueError, match=r"batch size 9 is outside the range 1\.\.8 .* --dynamic batch=1:9"):
        guard((torch.randn(9, 5, 24), torch.randn(9), torch.randn(24)))
    with pytest.raises(ValueError, match=r"expected shape \(batch, 5, 24\), got \(3, 4, 24\)"):
        guard((torch.randn(3, 4, 24), torch.randn(3), torch.randn(24)))
    with pytest.raises(ValueError, match=r"batch size 2, but input 0 \('x'\) has 3"):
        guard((torch.randn(3, 5, 24), torch.randn(2), torch.randn(24)))
    with pytest.raises(TypeError, match="expected dtype torch.float32"):
        check_inputs(specs, (torch.randn(3, 5, 24).half(), torch.randn(3), torch.randn(24)), device, {"batch": (1, 8)})


def test_dynamic_option_errors(tmp_path):
    model_file = ROOT / "sample_models" / "conv_block.py"
    for options, message in (
        (["--dynamic", "batch=0:4"], "out of bounds"),
        (["--dynamic", "seq=1:4"], "names no dynamic axes"),
        (["--dynamic", "batch=1:4,seq"], "names no dynamic axes"),
        (["--dynamic", "batch=1-4"], "not of the form AXIS=MIN:MAX"),
        (["--dynamic", "batch=1:1"], "holds one size"),
        (["--dynamic", "batch=1:4", "--batch", "1,2"], "axis batch is both bucketed and dynamic"),
        (["--batch", "1,2", "--buckets", "batch=4"], "not allowed with argument"),
    ):
        run = subprocess.run([sys.executable, "-m", "aotcombo", "build", str(model_file), "--arch", "sm_90",
                              "--out", str(tmp_path / "dist"), *options], capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 2 and message in run.stderr, (options, run.stderr)
        assert not (tmp_path / "dist").exists()
    with pytest.raises(UsageError, match="holds one size"):
        build_package(nn.Identity(), (torch.randn(2, 3),), arch=["sm_90"], out=tmp_path / "x", shapes=Dynamic(1, 1))
    with pytest.raises(UsageError, match="no size given"):
        build_package(nn.Identity(), (torch.randn(2, 3),), arch=["sm_90"], out=tmp_path / "x", shapes=Buckets(()))


def test_grid_per_call_binds_one_launcher_per_grid_size():
    from aotcombo.runtime.loader import GridPerCall

    class FakeKernel:
        grid, binds = (64, 1, 1), []

        def sized(self, grid):
            sized = FakeKernel()
            sized.grid = (grid, 1, 1)
            return sized

        def bind(self, stream):
            self.binds.append((self.grid, stream))
            return lambda *args: launched.append((self.grid, args))

    launched = []
    launch = GridPerCall(FakeKernel()).bind(stream=7)
    launch(3, "a", "b")
    launch(3, "c", "d")
    launch(64, "e", "f")
    assert launched == [((3, 1, 1), ("a", "b")), ((3, 1, 1), ("c", "d")), ((64, 1, 1), ("e", "f"))]
    assert FakeKernel.binds == [((3, 1, 1), 7), ((64, 1, 1), 7)]
    with pytest.raises(ValueError, match="grid 65 is outside 1..64"):
        launch(65, "g", "h")


def test_an_axis_a_rewrite_fixed_is_a_build_error(tmp_path, monkeypatch):
    """Export keeps every dynamic axis symbolic; a rewrite after it that fixes one (as a fake
    ``constant_pad_nd`` on a symbolic batch does) would make a package answering every batch with
    the example's. The build refuses it, naming the axis and the buckets that serve instead."""
    from aotcombo.builder.trace import entry
    from aotcombo.errors import UnsupportedModelError

    def specialising(ep):
        x = next(n for n in ep.graph.nodes if n.op == "placeholder" and not isinstance(n.meta["val"].shape[0], int))
        torch.ops.aten.constant_pad_nd.default(x.meta["val"], [1, 1])  # its fake kernel fixes the batch
        return 0

    monkeypatch.setenv("AOTCOMBO_TRACE_IN_PROCESS", "1")
    monkeypatch.setattr(entry.cudnn_epilogue, "fuse", specialising)
    model = nn.Sequential(nn.Linear(8, 8)).eval()
    with pytest.raises(UnsupportedModelError, match="fixed the dynamic axis 'batch' to 2"):
        build_package(model, [torch.randn(2, 8)], arch=["sm_90"], out=tmp_path, cache=False, shapes=Dynamic(1, 8))
