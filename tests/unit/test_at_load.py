"""Work on the weights alone runs once at load (``plan/at_load.py``), never per call.

Counted from the plan the program is rendered from: a per-call kernel launch or extern call
whose every tensor input is a weight (or a result ``prepare`` made from weights) recomputes
the same bytes at every call. ResNet-50's convolution weights and biases folded with their
BatchNorm (``kernels/conv/cudnn_epilogue.py``: 102 such kernels), a diffusers VAE decoder's
weights copied to channels-last (15): none per call once planned, the same count
without the pass (so the count can fail). Correctness under the interpreter against eager
(float32 compute on fp16/bf16 models: 1e-2 relative L2), random ops and the state a
forward updates stay per call."""

import pytest
import torch
from torch import nn

from aotcombo.builder import graph as g, kernels
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.plan.combos import make_plan
from aotcombo.builder.plan.dependencies import reads_writes, storage_roots
from aotcombo.builder.trace.entry import trace_model
from aotcombo.runtime.manifest import Buckets
from aotcombo.testing.compare import relative_error
from aotcombo.testing.paths import sample_model
from aotcombo.testing.zoo import FULL_SIZE_DIR, ZOO_DIR, model_file
from aotcombo.tools import interpret
from aotcombo.tools.inspection.contents import inspect_package
from aotcombo.tools.inspection.text import format_text


def weight_only_per_call(plan) -> list[str]:
    """The per-call launches (kernels, before combining, and extern calls) whose tensor inputs
    are all weights the program never updates, or values ``prepare`` made."""
    graph = plan.graph
    root = storage_roots(graph)
    state = {i.name for i in graph.inputs if i.kind == "weight" and i.key in graph.state}
    constant = {i.name for i in graph.inputs if i.kind == "weight"} - state
    prepared = set(plan.load.prepared) if plan.load else set()
    found = []
    ops = [s.launch for c in plan.call_combos for s in c.subs] + [op for op in plan.call_ops
                                                                     if isinstance(op, g.Extern)]
    for op in ops:
        reads, _ = reads_writes(op, graph)
        if reads and all(n in prepared or root.get(n, n) in constant for n in reads):
            found.append(op.kernel if isinstance(op, g.Launch) else op.op)
    return found


def _planned(name: str, at_load: bool):
    source = model_file(name.removeprefix("full/"), FULL_SIZE_DIR if name.startswith("full/") else ZOO_DIR)
    graph, _, _ = trace_model(source.get_model(), source.get_example_inputs(), 90)
    return make_plan(kernels.lower(graph), at_load=at_load)


FULL_SIZE = [pytest.param(name, n, marks=pytest.mark.slow) for name, n in (("full/resnet50", 102), ("full/gpt2", 1))]


@pytest.mark.parametrize("name, per_call", [("resnet50", 102), ("diffusers_vae_decoder", 15), *FULL_SIZE])
def test_no_kernel_per_call_reads_weights_alone(name, per_call):
    """Full size (slow): ResNet-50's 102 foldings, GPT-2's LM head padded to a
    multiple of 8 rows (its 4 other launches at load read nothing: masks, positions)."""
    pytest.importorskip("torchvision" if "resnet" in name else "diffusers" if "diffusers" in name else "transformers")
    without = _planned(name, at_load=False)
    assert len(weight_only_per_call(without)) == per_call
    plan = _planned(name, at_load=True)
    assert weight_only_per_call(plan) == []
    assert plan.load.launches >= per_call
    per_call_before, per_call_after = (p.kernel_launches + p.extern_calls for p in (without, plan))
    assert per_call_after == per_call_before - plan.load.launches


class Weights(nn.Module):
    """Weights transposed, concatenated, cast and padded in forward; a buffer updated per call;
    noise drawn per call."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(48, 64))
        self.b = nn.Parameter(torch.randn(16, 64))
        self.scale = nn.Parameter(torch.rand(64) + 0.5)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        w = (torch.cat([self.a, self.b]) * self.scale).t().contiguous().to(x.dtype)  # [64, 64]
        w = nn.functional.pad(w, (0, 8))  # [64, 72]
        self.calls.add_(1)
        return x @ w + self.calls.to(x.dtype), torch.rand_like(x).sum()


def test_weight_work_runs_in_prepare_and_matches_eager(tmp_path):
    torch.manual_seed(0)
    model = Weights().eval()
    example = (torch.randn(8, 64),)
    built = build_package(model, example, arch=["sm_90"], name="weights_at_load", out=tmp_path, cache=False,
                          native=False)
    plan = built.variants[0].plan
    assert plan.load is not None and plan.load.launches >= 1 and weight_only_per_call(plan) == []
    load_text = "\n".join(built.variants[0].sources[c.name] for c in plan.combos[:plan.load.combos])
    assert "rand" not in load_text  # the noise is drawn per call
    state = [i.name for i in plan.graph.inputs if i.key == "calls"]
    assert state and set(state) <= set(plan.load.forward_weights) and not set(state) & set(plan.load.prepared)
    assert "def prepare(kernels, weights, device):" in built.variants[0].program
    stats = built.manifest.specialization().variants["sm_90"].stats
    assert stats.load_launches == plan.load.launches and stats.load_bytes == 64 * 72 * 4
    report = format_text(inspect_package(built.wheel))
    assert f"at load: {plan.load.launches} launch" in report and "(18.4 kB)" in report

    eager = Weights().eval()
    eager.load_state_dict(model.state_dict())
    weights = [w.clone() for w in built.weights]
    for call in range(2):  # the buffer forward updates: per call, from the package's state
        x = torch.randn(8, 64, generator=torch.Generator().manual_seed(10 + call))
        with torch.no_grad():
            want, _ = eager(x)
        got, noise = interpret.run(built.variants[0].program, [(c.name, built.variants[0].sources[c.name], c.grid)
                                                                for c in plan.combos], weights, [x])
        assert relative_error(got, want) <= 1e-5, call
        assert noise.isfinite()


def test_buckets_with_the_same_weight_work_share_it(tmp_path):
    """Each bucket's program has its prepare; the same work on the weights hashes the same, so
    that a load runs it once for every bucket (runtime/loader.py)."""
    built = build_package(Weights().eval(), (torch.randn(8, 64),), arch=["sm_90"], out=tmp_path, cache=False,
                          native=False, shapes=Buckets(sizes=(2, 8)))
    keys = {v.prepare_key for s in built.manifest.specializations for v in s.variants.values()}
    assert len(keys) == 1 and None not in keys


def test_a_model_without_weight_work_has_no_prepare(tmp_path):
    source = sample_model("transformer_block")
    built = build_package(source.get_model(), source.get_example_inputs(), arch=["sm_90"], out=tmp_path, cache=False,
                          native=False)
    assert built.variants[0].plan.load is None and "def prepare" not in built.variants[0].program


class Edges(nn.Module):
    """What must stay per call: a copy of a weight that forward then updates in place, work on a
    buffer forward updates (its state), and a weight-derived tensor returned to the caller."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 32))
        self.register_buffer("seen", torch.ones(32))

    def forward(self, x):
        copied = (self.w * 2).contiguous()
        copied.add_(x.sum())  # written per call: its making cannot move to load
        from_state = self.seen * 3  # the state changes at every call
        self.seen.add_(x.mean(0))
        returned = self.w.t().contiguous()  # the caller's tensor: a fresh one per call
        return x @ copied + from_state, returned


def test_what_must_stay_per_call_does(tmp_path):
    torch.manual_seed(0)
    model = Edges().eval()
    built = build_package(model, (torch.randn(4, 32),), arch=["sm_90"], out=tmp_path, cache=False, native=False)
    plan = built.variants[0].plan
    graph = plan.graph
    weight = next(i.name for i in graph.inputs if i.key == "w")
    seen = next(i.name for i in graph.inputs if i.key == "seen")
    load_reads = {r for op in plan.load_ops for r in g.refs_in(getattr(op, "args", ()))} if plan.load else set()
    assert seen not in load_reads
    # every per-call kernel that reads the weight also writes what the caller or a later op sees
    per_call = [s.launch for c in plan.call_combos for s in c.subs]
    assert any(g.Ref(weight) in launch.args for launch in per_call)
    eager = Edges().eval()
    eager.load_state_dict(model.state_dict())
    weights = [w.clone() for w in built.weights]
    combos = [(c.name, built.variants[0].sources[c.name], c.grid) for c in plan.combos]
    for call in range(2):
        x = torch.randn(4, 32, generator=torch.Generator().manual_seed(20 + call))
        with torch.no_grad():
            want = eager(x)
        got = interpret.run(built.variants[0].program, combos, weights, [x])
        for a, b in zip(got, want):
            assert relative_error(a, b) <= 1e-5, call


class SinePositions(nn.Module):
    """No weights; a table made from ``arange`` alone (work at load), DETR's sine positions: a
    floor division into bfloat16, which Inductor lowered to a kernel Triton would not compile."""

    def forward(self, x):
        d = torch.arange(x.shape[-1], device=x.device).type_as(x)
        return x / 10000 ** (2 * torch.div(d, 2, rounding_mode="floor") / x.shape[-1])


def test_a_model_without_weights_runs_its_table_at_load(tmp_path):
    model, x = SinePositions(), torch.randn(4, 32).bfloat16()
    result = build_package(model, [x], arch=["sm_90"], out=tmp_path, cache=False)
    assert result.variants[0].plan.load is not None  # the table: made once, at load
    fresh = torch.randn(4, 32, generator=torch.Generator().manual_seed(3))
    got = interpret.run_variant(result, 0, [fresh.bfloat16()])
    assert relative_error(got.float(), model(fresh)) <= 1e-2
