"""The model zoo (sample_models/zoo/) and the Inductor constructs it found.

* Mixed-order reductions (one tensor reduced along both dims: Inductor fuses them
  into one kernel leaving partial results in a workspace, then reduces those in
  its wrapper as text) build and match eager under Triton's interpreter.
* A build that Inductor fails names the op and the model's line, never an empty
  "op named above".
* Zoo models build and their interpreted programs match eager on fresh random
  inputs: a fast subset here; the heavier ones are marked ``slow``.

Tolerances: relative L2 error (||got - eager|| / ||eager||, ``aotcombo.testing.compare``) <= 1e-4
for fp32 outputs, 1e-2 for bf16/fp16 ones.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch import nn
from torch.utils import _pytree
from aotcombo.builder.trace import diagnosis as trace_diagnosis
from aotcombo.builder.trace import wrapper_text as trace_wrapper_text
from aotcombo.tools import interpret
from aotcombo.errors import UnsupportedModelError
from aotcombo.builder.pipeline import build_package
from aotcombo.runtime.manifest import Dynamic
from aotcombo.testing import zoo
from aotcombo.testing.compare import relative_error

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def check(got, ref) -> list[float]:
    """Every output leaf has eager's shape, dtype and values (within TOLERANCE), in eager's
    structure (a transformers ModelOutput comes back as a dict); returns the errors."""
    if any(c.__name__ == "ModelOutput" for c in type(ref).__mro__):
        ref = dict(ref)
    got_leaves, got_spec = _pytree.tree_flatten(got)
    ref_leaves, ref_spec = _pytree.tree_flatten(ref)
    assert got_spec == ref_spec
    errors = []
    for g, r in zip(got_leaves, ref_leaves):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        if not r.is_floating_point():
            assert torch.equal(g, r)
            continue
        err = relative_error(g, r)  # raises on an all-zero eager output: the comparison would prove nothing
        assert err <= TOLERANCE[r.dtype], err
        errors.append(err)
    return errors


def mixed_order_kernels(result) -> list:
    return [k for k in result.variants[0].plan.graph.kernels if k.rsplit_size]


# --- the zoo ------------------------------------------------------------------------

# model -> the library its file needs (None: torch only).
NEEDS = {
    "bert": "transformers", "gpt2": "transformers", "gpt2_block": "transformers", "llama": "transformers",
    "qwen2": "transformers", "t5_encoder": "transformers", "whisper_encoder": "transformers",
    "vit_tiny": "timm", "swin": "timm", "convnext": "timm",
    "resnet50": "torchvision", "mobilenet_v3_small": "torchvision", "efficientnet_b0": "torchvision",
    "diffusers_unet": "diffusers", "diffusers_vae_decoder": "diffusers",
    "unet_stage": None, "moe": None, "dlrm": None, "llama_block": None,
    "gpt_neox": "transformers", "phi": "transformers", "bart": "transformers", "deberta_v2": "transformers",
    "falcon": "transformers", "bloom": "transformers", "segformer": "transformers",
    "mobilevit": "timm", "maxvit": "torchvision",
    "lraspp_mobilenet_v3": "torchvision",
}
# Built and run under the interpreter in the default test run: about 15 s each on 2 cores.
FAST = ("llama_block", "moe", "dlrm", "bert", "diffusers_vae_decoder")
WHEEL_BUDGET = 25 * 2**20  # bytes per wheel (sm_90 only); the whole zoo fits about 100 MB


def test_every_zoo_file_is_listed():
    assert sorted(zoo.ZOO) == sorted(NEEDS)  # model files; _weights.py is a helper they import


def load_zoo(name: str):
    if NEEDS[name]:
        pytest.importorskip(NEEDS[name])
    return zoo.model_file(name)


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_zoo_file_format(name):
    """get_model(): an eval-mode module on the CPU, the same weights every call;
    get_example_inputs(): a tuple of CPU tensors, other values for another seed."""
    module = load_zoo(name)
    model, again = module.get_model(), module.get_model()
    assert isinstance(model, nn.Module) and not model.training
    state, state_again = model.state_dict(), again.state_dict()
    assert all(t.device.type == "cpu" and torch.equal(t, state_again[k]) for k, t in state.items())
    inputs = module.get_example_inputs()
    assert isinstance(inputs, tuple) and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)
    other = module.get_example_inputs(seed=1)
    assert any(not torch.equal(a, b) for a, b in zip(inputs, other))


def _upcast(model):
    import copy

    return copy.deepcopy(model).float()


def check_zoo_model(name: str, tmp_path) -> dict:
    """Build ``name`` for sm_90 and run it under the interpreter on fresh inputs (seed 1;
    the build traced seed 0's). fp32 models: rel. L2 to eager <= 1e-4. bf16/fp16 models:
    the reference is the model in fp32 on the same inputs, and the package may be no
    farther from it than 1.5x eager's own error in the low precision (or 1e-2)."""
    module = load_zoo(name)
    model = module.get_model()
    result = build_package(model, module.get_example_inputs(), arch=["sm_90"], name=name, out=tmp_path / "dist",
                           cache=tmp_path / "cache")
    assert result.wheel.stat().st_size <= WHEEL_BUDGET
    inputs = module.get_example_inputs(seed=1)
    with torch.no_grad():
        ref = model(*inputs)
    got = interpret.run_variant(result, 0, [t.clone() for t in inputs])
    low = {p.dtype for p in model.parameters()} & {torch.bfloat16, torch.float16}
    if not low:
        return {"errors": check(got, ref), "result": result}
    with torch.no_grad():
        exact = _upcast(model)(*[t.float() if t.is_floating_point() else t for t in inputs])
    errors = []
    for g, r, e in zip(_pytree.tree_leaves(got), _pytree.tree_leaves(ref), _pytree.tree_leaves(exact)):
        assert g.shape == r.shape and g.dtype == r.dtype
        if not r.is_floating_point():
            assert torch.equal(g, r)
            continue
        eager_error = relative_error(r, e)
        assert eager_error < 0.1, f"eager in {r.dtype} is {eager_error:.2e} off fp32: no meaningful reference"
        err = relative_error(g, e)
        assert err <= max(1e-2, 1.5 * eager_error), (err, eager_error)
        errors.append(err)
    return {"errors": errors, "result": result}


@pytest.mark.parametrize("name", FAST)
def test_zoo_model_matches_eager(name, tmp_path):
    check_zoo_model(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(NEEDS) - set(FAST)))
def test_zoo_model_matches_eager_slow(name, tmp_path):
    check_zoo_model(name, tmp_path)


# --- mixed-order reductions ---------------------------------------------------------


class BothOrders(nn.Module):
    """Each input reduced along both dims (sum/sum and prod/sum), as in PyTorch's
    test_combo_kernels.py."""

    def forward(self, a, b):
        return a.sum(0), a.sum(1), b.prod(0), (b * 2).sum(1)


def _both_orders_inputs(seed, dtype=torch.float32, rows=(512, 256), cols=(64, 32)):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(rows[0], cols[0], generator=g).to(dtype)
    b = (1 + 0.01 * torch.randn(rows[1], cols[1], generator=g)).to(dtype)  # a product of 256 values stays finite
    return a, b


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mixed_order_reduction_matches_eager(dtype, tmp_path):
    """Small tensors (Inductor's size thresholds lifted with its non-strict mode) so
    the interpreter is fast; bf16 also checks the final cast the wrapper adds."""
    from torch._inductor import config

    model = BothOrders()
    with config.patch({"triton.mix_order_reduction_non_strict_mode": True}):
        result = build_package(model, _both_orders_inputs(0, dtype), arch=["sm_90"], out=tmp_path, cache=False)
    assert len(mixed_order_kernels(result)) == 2  # a sum/sum and a prod/sum pair
    program = result.variants[0].program
    assert "aten.sum.dim_IntList(" in program and "aten.prod.dim_int(" in program
    inputs = _both_orders_inputs(1, dtype)
    # The kernel accumulates in fp32, as Inductor does; eager's bf16 prod of 256 values
    # rounds at every step (10% off the exact product), so the reference is eager in fp32
    # on the same bf16 inputs, rounded to the output dtype.
    ref = [r.to(dtype) for r in model(*[x.float() for x in inputs])]
    check(list(interpret.run_variant(result, 0, list(inputs))), ref)


def _pytorch_case():
    """PyTorch's own case: an 8192x1024 fp32 tensor summed along both dims."""

    class Sums(nn.Module):
        def forward(self, a):
            return a.sum(0), a.sum(1)

    return Sums(), lambda seed: (torch.randn(8192, 1024, generator=torch.Generator().manual_seed(seed)),)


def test_mixed_order_reduction_builds_at_default_thresholds(tmp_path):
    model, inputs = _pytorch_case()
    result = build_package(model, inputs(0), arch=["sm_90"], out=tmp_path, cache=False)
    [kernel] = mixed_order_kernels(result)
    assert result.summary()["launches_per_forward"] == 2  # the fused kernel, then the sum of its partials
    # The workspace holds one partial row per split: its size follows RSPLIT_SIZE.
    splits = -(-8192 // kernel.rsplit_size)
    assert f"empty_strided(({splits * 1024},)" in result.variants[0].program


@pytest.mark.slow
def test_mixed_order_reduction_at_default_thresholds_matches_eager(tmp_path):
    model, inputs = _pytorch_case()
    result = build_package(model, inputs(0), arch=["sm_90"], out=tmp_path, cache=False)
    assert mixed_order_kernels(result)
    x = inputs(1)
    check(interpret.run_variant(result, 0, list(x)), model(*x))


def test_mixed_order_reduction_with_a_dynamic_batch_reduces_each_order_apart(tmp_path):
    """A split fixed at build time cannot follow a run-time batch: Inductor's mixed-order
    fusion is off for --dynamic builds, and the build still succeeds."""
    model, inputs = _pytorch_case()
    result = build_package(model, inputs(0), arch=["sm_90"], out=tmp_path, cache=False, shapes=Dynamic(4096, 16384))
    assert not mixed_order_kernels(result)
    assert "workspace" not in result.variants[0].program


# --- build errors name the op and the line -----------------------------------------


class SinModel(nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.sin(y) + 1  # the line the error must name


def test_inductor_lowering_failure_names_the_op_and_the_line(tmp_path):
    import torch._inductor.lowering as lowering

    def broken(*args, **kwargs):
        raise NotImplementedError("\n   ")  # an empty message, as some Inductor errors have

    with mock.patch.dict(lowering.lowerings, {torch.ops.aten.sin.default: broken}):
        with pytest.raises(UnsupportedModelError) as info:
            build_package(SinModel(), (torch.randn(8),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "aten.sin.default" in message
    assert "test_zoo.py:" in message and "torch.sin(y)" in message
    assert "named above" not in message
    assert not (tmp_path / "out").exists()


def test_unknown_wrapper_text_line_is_named():
    """A text line the FX converter cannot read fails with the line itself, not with
    Inductor's NotImplementedError."""
    with pytest.raises(UnsupportedModelError) as info:
        trace_wrapper_text.structured_lines(["buf3 = some_new_wrapper_step(buf1)"])
    assert "`buf3 = some_new_wrapper_step(buf1)`" in str(info.value)


def test_error_summary_is_never_empty():
    wrapped = NotImplementedError("\nFound line of unrecognized type '<class 'str'>':\n    'x = y'\n")
    assert trace_diagnosis.summary(wrapped) == "NotImplementedError: Found line of unrecognized type '<class 'str'>':"
    assert trace_diagnosis.summary(RuntimeError("")) == "RuntimeError: (no message)"
    assert trace_diagnosis.summary(RuntimeError("NotImplementedError: ")) == "RuntimeError: NotImplementedError:"


# --- attention through the public API (runtime/ops.py), in the traced layout --------------


class ContiguousHeads(nn.Module):
    """q, k, v made contiguous per head (as transformers' Whisper does), attention, and the
    heads merged back: Inductor reads the attention's result as [batch, seq, heads * dim]
    memory directly, the layout CUDA's memory-efficient kernel returns."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, 4, 16).transpose(1, 2).contiguous() for z in self.qkv(x).split(d, -1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).contiguous().reshape(b, t, d))


def _attention_by(kernels: str):
    """A build whose attention calls are torch's ("torch": builder/decode_attention.py off, as
    for calls it does not take) or kernels of ours ("ours")."""
    from aotcombo.builder.kernels.attention import lowering as decode_attention

    if kernels == "torch":
        return mock.patch.object(decode_attention, "lowering", return_value=None)
    return mock.patch.object(decode_attention, "lowering", wraps=decode_attention.lowering)


def _uses_attention(program: str, kernels: str, *needles: str) -> bool:
    if kernels == "torch":
        return "attention(" in program and "_scaled_dot" not in program and all(n in program for n in needles)
    return "attention(" not in program


@pytest.mark.parametrize("kernels", ["torch", "ours"])
def test_attention_output_has_the_fused_kernels_layout(tmp_path, kernels):
    torch.manual_seed(0)
    model = ContiguousHeads().eval()
    g = torch.Generator().manual_seed(0)
    with _attention_by(kernels):
        result = build_package(model, (torch.randn(2, 32, 64, generator=g),), arch=["sm_90"], out=tmp_path,
                               cache=False)
    assert _uses_attention(result.variants[0].program, kernels, "layout='bmhk'")
    x = torch.randn(2, 32, 64, generator=g)
    with torch.no_grad():
        check(interpret.run_variant(result, 0, [x]), model(x))


class AdditiveMask(nn.Module):
    """bf16 attention with an additive float mask in the model's dtype (transformers 4.x
    builds such masks from padding)."""

    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("kernels", ["torch", "ours"])
def test_attention_takes_a_low_precision_additive_mask(tmp_path, kernels):
    g = torch.Generator().manual_seed(0)

    def inputs():
        q, k, v = (torch.randn(2, 4, 32, 16, generator=g).to(torch.bfloat16) for _ in range(3))
        mask = torch.zeros(2, 1, 32, 32)
        mask[1, :, :, 24:] = torch.finfo(torch.bfloat16).min  # the second sequence is padded
        return q, k, v, mask.to(torch.bfloat16)

    model = AdditiveMask()
    with _attention_by(kernels):
        result = build_package(model, inputs(), arch=["sm_90"], out=tmp_path, cache=False)
    assert _uses_attention(result.variants[0].program, kernels)
    x = inputs()
    ref = model(*[t.float() for t in x]).to(torch.bfloat16)  # fp32 attention, as the kernels compute it
    check(interpret.run_variant(result, 0, list(x)), ref)


class AttentionDropout(nn.Module):
    def forward(self, q):
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.1)  # the line to name


def test_attention_dropout_error_names_the_line(tmp_path):
    with pytest.raises(UnsupportedModelError) as info:
        build_package(AttentionDropout(), (torch.randn(1, 2, 8, 8),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "dropout_p" in message and "test_zoo.py:" in message and "dropout_p=0.1)" in message


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


@pytest.mark.parametrize("kv_heads, head_dim", [(1, 16), (8, 12)], ids=["one_kv_head", "head_dim_12"])
def test_boolean_mask_where_no_fused_attention_applies(kv_heads, head_dim, tmp_path):
    """Attention that no fused kernel takes (one key/value head broadcast over eight query
    heads, as Falcon's multi-query attention calls it; a head dim that is not a multiple of
    8) under a boolean mask: it was added as 0/1 instead of masking (0.64 from eager), a
    silent wrong answer. Within 1e-5 of eager (fp32)."""
    import torch.nn.functional as F

    class Masked(nn.Module):
        def forward(self, q, k, v):
            mask = torch.ones(q.shape[0], 1, q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def inputs():
        return (torch.randn(2, 8, 24, head_dim), torch.randn(2, kv_heads, 24, head_dim),
                torch.randn(2, kv_heads, 24, head_dim))

    result = build_package(Masked(), inputs(), arch=["sm_90"], out=tmp_path / "dist", cache=False)
    x = inputs()
    got = interpret.run_variant(result, 0, list(x))
    assert relative_error(got, Masked()(*x)) <= 1e-5


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


# --- embedding bags as kernels (builder/decompositions.py) ------------------------------


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("weighted, last_offset", [(False, False), (True, False), (False, True)])
def test_embedding_bag_decomposition_matches_eager(mode, weighted, last_offset):
    from aotcombo.builder.trace.decompositions import embedding_bag

    if weighted and mode == "mean":
        pytest.skip("per-sample weights need mode='sum'")
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(50, 8, generator=g)
    ids = torch.randint(0, 50, (11,), generator=g)
    offsets = torch.tensor([0, 0, 3, 3, 7] + ([11] if last_offset else []))  # empty bags first and inside
    per_sample = torch.rand(11, generator=g) if weighted else None
    ref = torch.nn.functional.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=per_sample,
                                            include_last_offset=last_offset)
    got = embedding_bag(weight, ids, offsets, mode=["sum", "mean"].index(mode), per_sample_weights=per_sample,
                        include_last_offset=last_offset)[0]
    assert torch.allclose(got, ref, atol=1e-6)


@pytest.mark.parametrize("starts, n", [([0, 0, 3, 3, 7], 11), ([0, 4, 9, 9], 9), ([0, 2, 12], 9), ([0], 0)])
def test_each_ids_bag_is_counted_as_a_search_would_find_it(starts, n):
    """Empty bags first, inside and at the end (starting at n, or past it), no ids at all;
    no search made."""
    from aotcombo.builder.trace import decompositions

    starts = torch.tensor(starts)
    expected = torch.searchsorted(starts, torch.arange(n), right=True) - 1
    assert torch.equal(decompositions._bag_of_each_id(starts, n), expected)
    with mock.patch.object(torch, "searchsorted", wraps=torch.searchsorted) as search:
        decompositions._bag_of_each_id(starts, n)
        assert not search.called


def test_embedding_bags_become_combo_kernels(tmp_path):
    """The DLRM's 26 EmbeddingBag lookups are no extern calls: the forward is a handful of
    launches, far under Inductor's 40 (checked against eager under the interpreter by
    test_zoo_model_matches_eager[dlrm])."""
    module = load_zoo("dlrm")
    result = build_package(module.get_model(), module.get_example_inputs(), arch=["sm_90"], out=tmp_path, cache=False)
    plan = result.variants[0].plan
    assert not any("embedding_bag" in op.op for op in plan.ops if hasattr(op, "op"))
    assert len(plan.combos) + plan.extern_calls <= 20
    max_bag = torch.nn.EmbeddingBag(10, 4, mode="max")  # max mode stays an extern call

    class Max(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = max_bag

        def forward(self, ids, offsets):
            return self.bag(ids, offsets)

    kept = build_package(Max().eval(), (torch.tensor([1, 2, 3]), torch.tensor([0, 1])), arch=["sm_90"],
                         out=tmp_path / "max", cache=False)
    assert any("embedding_bag" in op.op for op in kept.variants[0].plan.ops if hasattr(op, "op"))


# --- transformers' MoE layers (builder/decompositions.py) -------------------------------


def _tiny_moe(name: str, experts_implementation: str | None = None):
    """A 2-layer MixtralForCausalLM or Qwen2MoeForCausalLM: hidden 64, 4 heads / 2 kv heads,
    4 experts top-2, intermediate 64, vocab 128, fp32; transformers' default experts
    implementation unless one is named."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "use_experts_implementation") and not hasattr(
            transformers.integrations, "use_experts_implementation"):
        pytest.skip("transformers without experts implementations (before 5.x)")
    common = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=128, max_position_embeddings=64, attn_implementation="sdpa",
                  use_cache=False)
    if experts_implementation:
        common["experts_implementation"] = experts_implementation
    torch.manual_seed(0)
    if name == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, **common)).eval()
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
        decoder_sparse_step=1, **common)).eval()


@pytest.mark.parametrize("rows, experts", [(16, 4), (3, 5)])
def test_grouped_mm_fallback_decomposition_matches_transformers(rows, experts):
    """Both formulations (every expert on every row; each row's expert gathered), with an empty
    group and rows past the last group (left zero), against transformers' own op."""
    pytest.importorskip("transformers.integrations.moe")  # registers the op (transformers 5)
    from aotcombo.builder.trace import decompositions

    op = torch.ops.transformers.grouped_mm_fallback.default
    assert op in decompositions.table()
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, 8, generator=g), torch.randn(experts, 8, 6, generator=g)
    ends = sorted(torch.randint(0, rows, (experts - 1,), generator=g).tolist())
    ends[0] = ends[1] if experts > 2 else ends[0]  # an empty group
    offs = torch.tensor(ends + [rows - 1], dtype=torch.int32)  # the last row in no group
    got = decompositions.grouped_mm_fallback(x, w, offs)
    assert torch.allclose(got, op(x, w, offs), rtol=1e-6, atol=1e-6)
    assert torch.equal(got[-1], torch.zeros(6))


def test_integer_histc_decomposition_bins_as_cuda_does():
    from aotcombo.builder.trace.decompositions import histc

    x = torch.tensor([0, 3, 3, 1, 7, -1, 8, 2, 5], dtype=torch.int32)
    bins = [((v - 0) * 3 // 7 if v < 7 else 2) for v in x.tolist() if 0 <= v <= 7]  # integer binning, top in last
    expected = torch.bincount(torch.tensor(bins), minlength=3).to(torch.int32)
    got = histc(x, bins=3, min=0, max=7)
    assert got.dtype == torch.int32 and torch.equal(got, expected)
    assert histc(x.float(), bins=3, min=0, max=7) is NotImplemented


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_transformers_moe_builds_with_fixed_shapes_and_matches_eager(name, tmp_path):
    """transformers 5's default experts ("grouped_mm") in fp32 call its custom op
    transformers::grouped_mm_fallback (a loop over offs.tolist()): the package must not call
    it (it needs transformers at run time and syncs with the host), and matches eager."""
    model = _tiny_moe(name)
    g = torch.Generator().manual_seed(0)
    result = build_package(model, (torch.randint(0, 128, (2, 8), generator=g),), arch=["sm_90"],
                           out=tmp_path / "dist", cache=False)
    assert "transformers" not in result.variants[0].program and "histc" not in result.variants[0].program
    assert all(op.startswith("aten::") for op in result.manifest.extern_ops)
    ids = torch.randint(0, 128, (2, 8), generator=g)
    with torch.no_grad():
        ref = model(ids)
    check([interpret.run_variant(result, 0, [ids])["logits"]], [ref.logits])


def test_transformers_eager_experts_error_names_the_line_and_the_fix(tmp_path):
    model = _tiny_moe("mixtral", experts_implementation="eager")
    with pytest.raises(UnsupportedModelError) as info:
        build_package(model, (torch.randint(0, 128, (2, 8)),), arch=["sm_90"], out=tmp_path / "out", cache=False)
    message = str(info.value)
    assert "modeling_mixtral.py:" in message and "MixtralExperts" in message
    assert 'set_experts_implementation("grouped_mm")' in message
    assert not (tmp_path / "out").exists()


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
