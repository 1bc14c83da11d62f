"""Tensor-parallel packages (``--tensor-parallel 2``) under Triton's interpreter, each rank a
process on the CPU with its collectives over torch.distributed's gloo backend
(``tools/interpret.run_ranks``), every rank on its own slices of the weights as ``load`` cuts
them (``BuildResult.rank_weights``), against the whole model in eager (float32, 1e-4 relative L2).

- ``llama_static_cache.py``'s decode step (transformers' Llama and StaticCache) with the default
  plan: three steps, logits on every rank and each rank's slice of the cache;
- a model file's own plan in torch's classes (``ColwiseParallel``, ``RowwiseParallel``, a
  gathered column-wise head), layers with biases."""

import math

import pytest
import torch
from torch import nn

from aotcombo.builder.pipeline import build_package
from aotcombo.testing.compare import relative_error
from aotcombo.testing.paths import sample_model
from aotcombo.tools import interpret

WORLD = 2
llama = sample_model("llama_static_cache")


def _run(built, rank_weights, inputs):
    variant = built.variants[0]
    combos = [(c.name, variant.sources[c.name], c.grid) for c in variant.plan.combos]
    return interpret.run_ranks(variant.program, combos, rank_weights, list(inputs))


@pytest.fixture(scope="module")
def llama_tp(tmp_path_factory):
    return build_package(llama.get_model(), llama.get_example_inputs(), arch=["sm_90"], name="llama_tp",
                         out=tmp_path_factory.mktemp("llama_tp"), cache=False, native=False, tensor_parallel=WORLD)


def test_the_default_plan_splits_attention_mlp_head_and_cache(llama_tp):
    m = llama_tp.manifest
    dims = {w.name.rpartition(".")[2].split("_")[0] if "|" not in w.name else "combined": w.shard_dim
            for w in m.weights.tensors if w.shard_dim is not None}
    assert m.world_size == WORLD
    assert {w.shard_dim for w in m.weights.tensors if "o_proj" in w.name or "down_proj" in w.name} == {1}
    assert {w.shard_dim for w in m.weights.tensors if "cache" in w.name} == {1}
    assert dims["combined"] == 0 and {"weight", "key", "value"} <= set(dims)
    collectives = [op for op in m.extern_ops if op.startswith("_c10d_functional::")]
    assert "_c10d_functional::all_reduce_.default" in collectives
    assert "_c10d_functional::all_gather_into_tensor.default" in collectives


def test_llama_decode_steps_match_eager_on_every_rank(llama_tp):
    eager = llama.get_model()
    ranks = [llama_tp.rank_weights(r) for r in range(WORLD)]
    names = [w.name for w in llama_tp.manifest.weights.tensors]
    with torch.no_grad():
        for pos, token in enumerate((11, 42, 7)):
            inputs = (torch.tensor([[token]]), torch.tensor([pos]))
            expected = eager(*inputs)
            for rank, got in enumerate(_run(llama_tp, ranks, inputs)):
                assert relative_error(got, expected) <= 1e-4, (pos, rank)
    buffers = dict(eager.named_buffers())
    for rank in range(WORLD):
        for name in llama_tp.manifest.weights.state:
            if "cache" in name:
                heads = buffers[name].shape[1] // WORLD
                whole = buffers[name][:, rank * heads:(rank + 1) * heads]
                assert torch.allclose(ranks[rank][names.index(name)], whole, atol=1e-5), (rank, name)


class Head(nn.Module):
    """Two linears with biases split column- then row-wise, and a head gathered from its columns."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down, self.head = nn.Linear(32, 64), nn.Linear(64, 32), nn.Linear(32, 48)

    def forward(self, x):
        return self.head(x + self.down(torch.nn.functional.gelu(self.up(x))))


def test_a_plan_in_torchs_classes_matches_eager(tmp_path):
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = {"up": ColwiseParallel(), "down": RowwiseParallel(), "head": ColwiseParallel(output_layouts=Replicate())}
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    built = build_package(Head().eval(), (x,), arch=["sm_90"], name="head_tp", out=tmp_path, cache=False,
                          native=False, tensor_parallel=WORLD, tp_plan=plan)
    assert {w.name: w.shard_dim for w in built.manifest.weights.tensors} == {
        "up.weight": 0, "up.bias": 0, "down.weight": 1, "down.bias": None, "head.weight": 0, "head.bias": 0}
    with torch.no_grad():
        expected = Head().eval()(x)
    outputs = _run(built, [built.rank_weights(r) for r in range(WORLD)], (x,))
    for got in outputs:
        assert relative_error(got, expected) <= 1e-4


def test_the_launch_after_a_collective_waits_for_it_in_full(llama_tp):
    """A combo launched right after a collective's wait is not launched early (PDL): the stream
    waits there on NCCL's event, not on a kernel; every other combo on sm_90 is."""
    variant = llama_tp.variants[0]
    def host(line: str) -> bool:  # a release, an allocation or a view: no device work
        return line.strip().startswith("del ") or "= empty_strided(" in line or "= as_strided(" in line

    lines = [line for line in variant.program.splitlines() if not host(line)]
    after = set()
    for i, line in enumerate(lines):
        if "wait_tensor" in line and i + 1 < len(lines) and lines[i + 1].strip().startswith("kernels["):
            after.add(variant.plan.combos[int(lines[i + 1].split("[")[1].split("]")[0])].name)
    assert len(after) == 4  # after each of the four all-reduces (the gather ends the program)
    for combo in variant.plan.combos:
        assert ("gdc_wait" in variant.sources[combo.name]) == (combo.name not in after), combo.name


def test_each_rank_writes_its_cache_in_place(llama_tp):
    """A decode step writes one position of each rank's KV cache, as the one-GPU program does:
    no kernel spans a whole cache (a copy of it, then a copy back)."""
    m, variant = llama_tp.manifest, llama_tp.variants[0]
    cache_numels = {math.prod(w.shape) for w in m.weights.tensors if "cache" in w.name and w.shard_dim == 1}
    assert cache_numels
    for combo in variant.plan.combos:
        for sub in combo.subs:
            assert dict(sub.kernel.numels).get("x") not in cache_numels, (combo.name, sub.kernel.name)
