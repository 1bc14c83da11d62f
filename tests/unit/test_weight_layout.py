"""A [k, n] weight cuBLAS reads (``kernels/linear/weight_layout.py``): stored [n, k], transposed once
at load, where the product has 256-2048 rows fixed at build time and 16-bit operands; left as the
model wrote it elsewhere. The package, run by the interpreter, against eager."""

import pytest
import torch
from torch import nn

from aotcombo.builder import graph as g, kernels
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.plan.combos import make_plan
from aotcombo.builder.trace.entry import trace_model
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing.compare import relative_error
from aotcombo.tools import interpret

PRODUCTS = ("aten::addmm", "aten::mm", "aten::_addmm_activation")


class Conv1DFFN(nn.Module):
    """GPT-2's ``Conv1D`` twice, ``addmm(b, x.view(-1, k), W)`` with W as [k, n], an exact GELU
    between (Inductor's kernel, not cuBLASLt's epilogue); too large for the fused linears of ours
    (2 m n k > 2^27). ``shared``: a third product by the first weight."""

    def __init__(self, d=256, h=1024, shared=False):
        super().__init__()
        self.w_up, self.b_up = nn.Parameter(torch.randn(d, h) / d ** 0.5), nn.Parameter(torch.randn(h) / 10)
        self.w_down, self.b_down = nn.Parameter(torch.randn(h, d) / h ** 0.5), nn.Parameter(torch.randn(d) / 10)
        self.shared = shared

    def forward(self, x):
        rows = x.view(-1, x.shape[-1])
        u = nn.functional.gelu(torch.addmm(self.b_up, rows, self.w_up))
        y = torch.addmm(self.b_down, u, self.w_down)
        if self.shared:
            y = y + torch.mm(u @ self.w_down, self.w_up).sum(-1, keepdim=True)
        return y.view(*x.shape)


def _plan(module, x, **kw):
    graph, _, _ = trace_model(module, (x,), 90, **kw)
    return graph, make_plan(kernels.lower(graph), at_load=True)


def _weights_read_per_call(graph, plan) -> set[str]:
    """The weight inputs the per-call products read as they are."""
    weights = {i.name for i in graph.inputs if i.kind == "weight" and i.key.startswith("w_")}
    products = [op for op in plan.call_ops if isinstance(op, g.Extern) and op.op.startswith(PRODUCTS)]
    return {n for op in products for n in g.refs_in(op.args)} & weights


def test_products_of_a_few_hundred_rows_read_a_copy_made_at_load():
    graph, plan = _plan(Conv1DFFN().to(torch.bfloat16).eval(), torch.randn(4, 128, 256, dtype=torch.bfloat16))
    assert plan.load is not None and plan.load.launches == 2  # one transpose a weight
    assert _weights_read_per_call(graph, plan) == set()


def test_a_weight_two_products_read_is_copied_once():
    graph, plan = _plan(Conv1DFFN(shared=True).to(torch.bfloat16).eval(),
                        torch.randn(4, 128, 256, dtype=torch.bfloat16))
    assert plan.load is not None and plan.load.launches == 2
    assert _weights_read_per_call(graph, plan) == set()


@pytest.mark.parametrize("rows, dtype", [(128, torch.bfloat16), (4096, torch.bfloat16), (512, torch.float32)],
                         ids=["few-rows", "many-rows", "float32"])
def test_left_as_the_model_wrote_it(rows, dtype):
    """Outside the measured range of rows, and for 32-bit products, the weight is read as it is
    (at 128 rows the first product is a fused linear of ours, which reads it as [k, n] too)."""
    graph, plan = _plan(Conv1DFFN().to(dtype).eval(), torch.randn(rows // 128, 128, 256, dtype=dtype))
    assert plan.load is None
    assert "p_w_down" in _weights_read_per_call(graph, plan)


def test_dynamic_rows_are_left_alone(tmp_path):
    def make(batch):
        return (torch.randn(batch, 128, 256, dtype=torch.bfloat16),)

    result = build_package(Conv1DFFN().to(torch.bfloat16).eval(), make(4), arch=["sm_90"], out=tmp_path,
                           cache=False, jobs=1, shapes=Dynamic(1, 8), make_inputs=make)
    assert all(v.plan.load is None for v in result.variants)


def test_package_matches_eager(tmp_path):
    torch.manual_seed(0)
    module = Conv1DFFN(shared=True).to(torch.bfloat16).eval()
    example = torch.randn(4, 128, 256, dtype=torch.bfloat16)
    result = build_package(module, [example], arch=["sm_90"], out=tmp_path, cache=False, jobs=1)
    assert result.variants[0].plan.load.launches == 2
    for seed in (1, 2):
        x = torch.randn(4, 128, 256, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(seed))
        got = interpret.run_variant(result, 0, [x])
        with torch.no_grad():
            want = module.float()(x.float())
        module.to(torch.bfloat16)
        assert relative_error(got.float(), want) < 1e-2  # bf16 products, float32 sums
