"""Inductor on the exported program without AOTAutograd's second trace (``trace/direct.py``)
writes the kernels and calls ``compile_fx`` writes: the same kernel sources, launches and
extern calls, for static and dynamic sizes, norms that decompose into several outputs, and a
KV cache written in place. (The two may number and order the kernels apart: Inductor's
schedule reads the graph inputs' names, which the second trace renames ``arg0_1``, ...; with
dynamic sizes, the second trace reads a size off the first tensor that has it, export off the
tensor at hand: a view of a linear's output read for its size is not a pointwise use, and
Inductor then leaves the bias in cuBLAS's addmm rather than in the GELU's kernel.)"""

import collections
import re
from unittest import mock

import pytest
import torch
from torch import nn

from aotcombo.builder.trace import direct, entry
from aotcombo.runtime.manifest import Axis, Dynamic


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(nn.functional.gelu(self.up(h))), torch.softmax(h, -1).mean(1)


class Cache(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 16, 8))
        self.proj = nn.Linear(8, 8)

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, self.proj(x))
        return torch.rms_norm(self.cache, (8,)).sum(1)


def _program(module, inputs, dynamic=None) -> tuple:
    graph, _, _ = entry.trace_model(module, inputs, 90, dynamic=dynamic)
    kernels = sorted(re.sub(r"(def triton_\w+?)_\d+\(", r"\1(", k.source) for k in graph.kernels)
    return kernels, collections.Counter(type(op).__name__ for op in graph.ops), len(graph.kernels)


def _by_compile_fx(gm, fake_inputs, decompositions):
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.decomposition import select_decomp_table

    compile_fx(gm, fake_inputs, decompositions=direct._before(decompositions, select_decomp_table()))


@pytest.mark.parametrize("case", ["block", "block_dynamic", "cache"])
def test_the_same_kernels_as_compile_fx(case):
    torch.manual_seed(0)
    if case == "cache":
        module, inputs, dynamic = Cache().eval(), (torch.randn(1, 1, 8), torch.tensor([3])), None
    else:
        module, inputs = Block().eval(), (torch.randn(2, 8, 64),)
        dynamic = Dynamic(axes=(Axis("seq", 2, 32, ((0, 1),)),)) if case == "block_dynamic" else None
    ours = _program(module, inputs, dynamic)
    with mock.patch.object(direct, "compile_without_retrace", _by_compile_fx):
        theirs = _program(module, inputs, dynamic)
    if dynamic is None:
        assert ours == theirs
    else:
        assert ours[1:] == theirs[1:]
    assert ours[2] >= 2


def test_a_decomposed_op_of_several_outputs_is_spliced():
    """``native_layer_norm`` (three outputs read through getitem) in Inductor's table: its nodes
    replace it, and the graph computes the same values."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, w, b):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [8], w, b, 1e-5)
        return out * 2, mean + rstd

    real = (torch.randn(4, 8), torch.randn(8), torch.randn(8))
    gm = make_fx(f)(*real)
    expected = gm(*real)
    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(t) for t in real]
        traced = make_fx(f)(*fakes)
    direct.decompose(traced, select_decomp_table(), mode)
    assert not any(n.target is torch.ops.aten.native_layer_norm.default for n in traced.graph.nodes)
    for got, want in zip(traced(*real), expected):
        torch.testing.assert_close(got, want)


def _exported(module, inputs):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from aotcombo.builder.trace.export import export_on_fake_gpu
    from aotcombo.builder.trace.virtual_gpu import virtual_gpu

    with virtual_gpu(90):
        return export_on_fake_gpu(module, inputs, FakeTensorMode(allow_non_fake_inputs=False), 90)


class Reshapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.proj, self.drop = nn.LayerNorm(16), nn.Linear(16, 16), nn.Dropout(0.1)

    def forward(self, x):
        h = self.drop(self.proj(self.norm(x))).reshape(2, -1, 4, 4).transpose(1, 2)
        return h.flatten(2).to(torch.float64).chunk(2, dim=-1)[0]


def test_exported_program_decomposed_as_run_decompositions_does():
    """Without the retrace, the same ops as ``run_decompositions`` (``linear`` and ``layer_norm``
    kept; ``reshape``, ``dropout``, ``to`` and ``chunk`` decomposed), and the same values."""
    from aotcombo.builder.trace import decompositions

    module, inputs = Reshapes().eval(), (torch.randn(2, 8, 16),)
    ours = _exported(module, inputs)
    theirs = _exported(module, inputs).run_decompositions(decompositions.table())
    assert direct.decompose_exported(ours, decompositions.table())

    def ops(ep):
        return collections.Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")

    assert ops(ours) == ops(theirs)
    assert "aten.linear.default" in ops(ours) and "aten.reshape.default" not in ops(ours)


def test_a_program_that_mutates_a_buffer_is_left_to_run_decompositions():
    module = Cache().eval()
    ep = _exported(module, (torch.randn(1, 1, 8), torch.tensor([3])))
    before = ep.graph_module.code
    assert not direct.decompose_exported(ep, {})
    assert ep.graph_module.code == before


def test_a_decomposition_that_fails_alone_falls_back_to_the_whole_program_s_trace(monkeypatch):
    """An op whose decomposition raises when traced by itself: ``run_decompositions`` and
    ``compile_fx`` trace the program as before, and the kernels are theirs."""
    torch.manual_seed(0)
    module, inputs = Block().eval(), (torch.randn(2, 8, 64),)
    with mock.patch.object(direct, "compile_without_retrace", _by_compile_fx):
        theirs = _program(module, inputs)

    def fails(node, table, fake_mode):
        raise RuntimeError(f"{node.target} cannot be traced alone")

    monkeypatch.setattr(direct, "_trace_alone", fails)
    assert _program(module, inputs) == theirs
