"""Tensor parallel without a GPU: plans read and checked, the model split as rank 0 sees it, each
rank's slices cut as ``load`` cuts them, the manifest's fields, and the runtime's checks of the
process group, each failure a clear error naming its fix."""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from aotcombo.builder.inputs.options import BuildOptions
from aotcombo.builder.parallel import plan as plans
from aotcombo.builder.parallel.shard import shard_model
from aotcombo.errors import UsageError
from aotcombo.runtime import parallel
from aotcombo.runtime.manifest import Manifest, Weight
from aotcombo.testing.paths import sample_model


class Block(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.q_proj, self.o_proj = nn.Linear(32, hidden), nn.Linear(hidden, 32)
        self.norm = nn.LayerNorm(32)
        self.register_buffer("k_cache", torch.zeros(1, 4, 8, 16))

    def forward(self, x):
        return self.o_proj(self.q_proj(self.norm(x)))


def test_the_default_plan_names_llama_style_layers():
    plan = plans.default_plan(sample_model("llama_static_cache").get_model())
    kinds = {name.rpartition(".")[2]: kind for name, kind in plan.items()}
    assert kinds["q_proj"] == kinds["gate_proj"] == "colwise" and kinds["o_proj"] == kinds["down_proj"] == "rowwise"
    assert kinds["lm_head"] == "colwise_rep" and kinds["key_cache_0"] == ("shard", 1)


def test_a_model_without_such_layers_needs_its_own_plan():
    with pytest.raises(UsageError, match="get_tp_plan"):
        plans.default_plan(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)))


def test_splitting_keeps_rank_0s_slices_and_the_whole_tensors():
    model = Block()
    whole = model.q_proj.weight.detach().clone()
    sharding = shard_model(model, {"q_proj": "colwise", "o_proj": "rowwise", "k_cache": ("shard", 1)}, 2)
    assert model.q_proj.weight.shape == (32, 32) and torch.equal(model.q_proj.weight, whole[:32])
    assert model.o_proj.weight.shape == (32, 32) and model.k_cache.shape == (1, 2, 8, 16)
    assert torch.equal(sharding.whole["q_proj.weight"], whole)
    assert sharding.dims == {"q_proj.weight": 0, "q_proj.bias": 0, "o_proj.weight": 1, "k_cache": 1}


@pytest.mark.parametrize("plan, message", [
    ({"v_proj": "colwise"}, "names no module or tensor"),
    ({"norm": "colwise"}, "is a LayerNorm; aotcombo splits nn.Linear"),
    ({"q_proj": "sideways"}, "not a layer style"),
    ({"k_cache": "colwise"}, "is a tensor; it takes Shard"),
])
def test_a_bad_plan_is_refused(plan, message):
    with pytest.raises(UsageError, match=message):
        shard_model(Block(), plan, 2)


def test_sequence_parallel_is_refused():
    from torch.distributed.tensor.parallel import SequenceParallel

    with pytest.raises(UsageError, match="not a layer style"):
        shard_model(Block(), {"q_proj": SequenceParallel()}, 2)


def test_a_split_the_ranks_cannot_share_evenly_is_refused():
    with pytest.raises(UsageError, match="q_proj.weight has 60 along dim 0, which 8 ranks cannot split evenly"):
        shard_model(Block(hidden=60), {"q_proj": "colwise"}, 8)


@pytest.mark.parametrize("ranks", [0, -1, 2.5, True, 65])
def test_the_rank_count_is_checked(ranks, tmp_path):
    with pytest.raises(UsageError, match="--tensor-parallel"):
        BuildOptions.checked(out=tmp_path, tensor_parallel=ranks)


def test_a_combined_weight_is_cut_part_by_part():
    """q (4 rows per rank) and k (2 rows per rank) combined along dim 0, then split by rows."""
    w = Weight("q|k", "float32", (6, 3), parts=("q", "k"), part_rows=(4, 2), shard_dim=0)
    q, k = torch.arange(24.0).view(8, 3), 100 + torch.arange(12.0).view(4, 3)
    whole = torch.cat([q, k])
    assert torch.equal(parallel.rank_slice(w, whole, 1, 2), torch.cat([q[4:], k[2:]]))
    columns = Weight("o", "float32", (4, 2), shard_dim=1)
    sliced = parallel.rank_slice(columns, torch.arange(16.0).view(4, 4), 1, 2)
    assert sliced.is_contiguous() and torch.equal(sliced, torch.arange(16.0).view(4, 4)[:, 2:])
    assert parallel.whole_shape(w, 2, 4) == (8, 3) and parallel.whole_shape(columns, 2) == (4, 4)


def _manifest(world: int) -> Manifest:
    from aotcombo.runtime.manifest import Static, Weights

    return Manifest(name="pkg", version="1", built_with={}, torch=("2.11", "2.14"), archs=(90,), ptx_arch=90,
                    shapes=Static(), specializations=(), extern_ops=(), world_size=world,
                    weights=Weights(None, (Weight("w", "float32", (2, 2), shard_dim=0),), 0, ""))


def test_the_manifest_keeps_world_size_and_shard_dims():
    again = Manifest.from_json(_manifest(2).to_json())
    assert again.world_size == 2 and again.weights.tensors[0].shard_dim == 0


def test_load_without_a_process_group_says_torchrun():
    with pytest.raises(RuntimeError, match="torchrun --nproc-per-node 2"):
        parallel.check_group(_manifest(2), torch.device("cpu"), None, None)


def test_a_one_gpu_package_refuses_ranks():
    with pytest.raises(ValueError, match="rebuild it with --tensor-parallel"):
        parallel.check_group(_manifest(1), torch.device("cpu"), 1, 2)


def test_a_group_of_another_size_is_refused(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="built for 2 tensor-parallel ranks, and the process group has 1"):
            parallel.check_group(_manifest(2), torch.device("cpu"), None, None)
    finally:
        dist.destroy_process_group()
