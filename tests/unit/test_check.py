"""The build-time check of a rendered program on the meta device (aotcombo/builder/check.py)."""

import pytest
import torch

from aotcombo.builder import graph as g
from aotcombo.builder.codegen.check import check_on_meta, load_program
from aotcombo.errors import UnsupportedModelError

PROGRAM = """
import torch

from ._runtime.ops import attention

aten = torch.ops.aten


def forward(kernels, weights, device, x, mask):
    w, = weights
    y = aten.mm.default(x, w)
    kernels[0](y)
    q = y.view(1, 2, 4, 4)
    out = attention(q, q, q, layout="bmhk", attn_mask=mask, is_causal=False, scale=None)
    return out[0]
"""


def _graph(w_shape=(4, 8), x_dtype="float32"):
    def spec(shape, dtype="float32"):
        return g.TensorSpec(shape, tuple(torch.empty(shape).stride()), dtype)

    inputs = (g.Input("w", spec(w_shape), "weight", "w"), g.Input("x", spec((4, 4), x_dtype), "user", 0),
              g.Input("mask", spec((1, 1, 4, 4), "bool"), "user", 1))
    return g.Graph(arch=90, inputs=inputs, ops=(), kernels=(), outputs=())


def test_a_program_whose_calls_fit_passes():
    check_on_meta(PROGRAM, _graph(), "fits")  # the attention helper, a bool mask included


@pytest.mark.parametrize("graph, message", [
    (_graph(w_shape=(5, 8)), r"at `y = aten.mm.default\(x, w\)`: RuntimeError: .*same reduction dim"),
    (_graph(x_dtype="int64"), r"at `out = attention\(q, q, q, .*`: RuntimeError: expected scalar type"),
])
def test_a_call_this_torch_refuses_fails_the_build_naming_the_line(graph, message):
    with pytest.raises(UnsupportedModelError, match=message) as e:
        check_on_meta(PROGRAM, graph, "refused")
    assert f"torch {torch.__version__}'s meta tensors" in str(e.value) and e.value.fix


def test_programs_load_as_modules_of_a_package_with_the_runtime():
    module = load_program(PROGRAM, "loaded")
    assert module.attention.__module__.endswith("._runtime.ops") and module.__name__ == "aotcombo_program.loaded"
