"""Named dynamic axes (``--dynamic batch=...,seq=...`` over a model's ``get_dynamic_axes()``):
one trace with a symbolic batch and sequence length serves every (batch, seq) in range.
Checked under the interpreter against eager (fp32, relative L2 ≤ 1e-4) at sizes that
include the range ends, primes and off-by-one lengths, with fresh inputs whose padding
masks differ per row; and the errors: out-of-range sizes, inputs that disagree on an
axis, ranges the model does not allow."""

import pytest
import torch

from aotcombo.builder.pipeline import build_package
from aotcombo.errors import UnsupportedModelError, UsageError
from aotcombo.runtime.inputs import InputSpec, make_input_check
from aotcombo.runtime.manifest import Buckets, Dynamic
from aotcombo.testing import zoo
from aotcombo.testing.compare import leaves, relative_error
from aotcombo.tools import interpret

SIZES = [(1, 1), (1, 128), (4, 1), (4, 128), (2, 7), (3, 77), (1, 64), (2, 65), (4, 127), (3, 13)]
RANGES = {"batch": (1, 4), "seq": (1, 128)}


def _inputs(batch: int, seq: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch):  # each row but the first padded after a length of its own
        mask[b, int(torch.randint(1, seq + 1, (1,), generator=g)):] = 0
    return ids, mask


@pytest.fixture(scope="module", params=["bert", "t5_encoder"])
def built(request, tmp_path_factory):
    module = zoo.model_file(request.param)
    model = module.get_model().eval()
    result = build_package(model, module.get_example_inputs(), arch=["sm_90"], name=request.param,
                           out=tmp_path_factory.mktemp("axes"), cache=False, jobs=1,
                           shapes=Dynamic(**RANGES), dynamic_axes=module.get_dynamic_axes())
    return request.param, model, result


def test_one_trace_names_both_axes(built):
    _, _, result = built
    m = result.manifest
    # one trace for every size; its calls of a few tokens may have a program of their own (size_classes)
    assert m.shapes.ranges == RANGES and m.specializations[-1].max_tokens is None and len(m.specializations) <= 2
    assert [i.shape for i in m.inputs] == [("batch", "seq"), ("batch", "seq")]
    assert dict((a.name, a.dims) for a in m.shapes.axes) == {"batch": ((0, 0), (1, 0)), "seq": ((0, 1), (1, 1))}


@pytest.mark.parametrize("batch,seq", SIZES)
def test_every_size_matches_eager(built, batch, seq):
    _, model, result = built
    inputs = _inputs(batch, seq, 1000, seed=batch * 1000 + seq)
    with torch.no_grad():
        ref = leaves(model(*inputs))
    # the program for every size; and the few-token class's, where the call is in it
    variants = [0] + [i for i, v in enumerate(result.variants) if v.max_tokens and batch * seq <= v.max_tokens]
    for variant in variants:
        got = leaves(interpret.run_variant(result, variant, inputs))
        for g, r in zip(got, ref, strict=True):
            assert g.shape == r.shape
            assert relative_error(g, r) <= 1e-4


def test_sizes_out_of_range_or_disagreeing_are_named(built):
    _, _, result = built
    specs = [InputSpec.of(i) for i in result.manifest.inputs]
    check = make_input_check(specs, torch.device("cpu"), RANGES)
    ids, mask = _inputs(2, 9, 1000, seed=1)
    assert check((ids, mask))
    with pytest.raises(ValueError, match=r"input 0 \('input_ids'\): seq size 129 is outside the range 1\.\.128 .*"
                                         r"--dynamic seq=1:129"):
        check(_inputs(2, 129, 1000, seed=1))
    with pytest.raises(ValueError, match=r"input 1 \('attention_mask'\): seq size 8, but input 0 \('input_ids'\) "
                                         r"has 9: inputs sharing the seq axis must agree"):
        check((ids, mask[:, :8]))
    with pytest.raises(ValueError, match=r"batch size 5 is outside the range 1\.\.4"):
        check(_inputs(5, 9, 1000, seed=1))


def test_a_range_the_model_does_not_allow_names_the_bound(tmp_path):
    module = zoo.model_file("bert")  # 128 positions
    with pytest.raises(UnsupportedModelError, match=r"seq in 1\.\.200: the model needs seq <= 128 at "
                                                    r"modeling_bert\.py:\d+ \(`position_ids = (.|\n)*"
                                                    r"--dynamic seq=1:128"):
        build_package(module.get_model().eval(), module.get_example_inputs(), arch=["sm_90"], out=tmp_path,
                      cache=False, jobs=1, shapes=Dynamic(batch=(1, 4), seq=(1, 200)),
                      dynamic_axes=module.get_dynamic_axes())


@pytest.mark.parametrize("axes,message", [
    (None, "names no dynamic axes"),
    ({"ids": {1: "seq"}}, "input 'ids', which forward does not take"),
    ({"input_ids": {2: "seq"}}, "name dim 2, but it has 2 dims"),
    ({"input_ids": [0, 1]}, "are a list, not a dict"),
    ({"input_ids": {0: "batch"}}, r"--dynamic seq: the model's dynamic axes are batch"),
])
def test_axis_declaration_errors(tmp_path, axes, message):
    module = zoo.model_file("bert")
    with pytest.raises(UsageError, match=message):
        build_package(module.get_model().eval(), module.get_example_inputs(), arch=["sm_90"], out=tmp_path,
                      cache=False, jobs=1, shapes=Dynamic(batch=(1, 4), seq=(1, 64)), dynamic_axes=axes)


@pytest.fixture(scope="module")
def seq_buckets(tmp_path_factory):
    module = zoo.model_file("bert")
    model = module.get_model().eval()
    result = build_package(model, module.get_example_inputs(), arch=["sm_90"], name="bert_seq",
                           out=tmp_path_factory.mktemp("seq"), cache=False, jobs=1,
                           shapes=Buckets((16, 32), pad=True, axis="seq"), dynamic_axes=module.get_dynamic_axes())
    return model, result


def test_buckets_on_a_named_axis_pad_exactly(seq_buckets):
    model, result = seq_buckets
    shapes = result.manifest.shapes
    assert (shapes.axis, shapes.sizes, shapes.dims) == ("seq", (16, 32), ((0, 1), (1, 1)))
    assert shapes.out_dims == ((0, 1),)  # last_hidden_state [b, seq, d]; pooler_output [b, d] is not cut
    assert [s.batch for s in result.manifest.specializations] == [16, 32]
    ids, mask = _inputs(2, 23, 1000, seed=5)  # runs in bucket 32, padded with zeros
    padded = tuple(torch.cat([t, t.new_zeros(2, 9)], 1) for t in (ids, mask))
    got = leaves(interpret.run_variant(result, 1, padded))
    with torch.no_grad():
        ref = leaves(model(ids, mask))
    assert relative_error(got[0][:, :23], ref[0]) <= 1e-4 and relative_error(got[1], ref[1]) <= 1e-4


def test_padding_that_would_write_state_is_refused(tmp_path):
    from aotcombo.testing.paths import sample_model

    source = sample_model("llama_static_cache")  # padded positions would write the KV cache
    with pytest.raises(UsageError, match=r"--pad: (output 0 at seq \d+ changes|the model's state)"):
        build_package(source.get_model(), source.get_prompt_inputs(), arch=["sm_90"], out=tmp_path, cache=False,
                      jobs=1, shapes=Buckets((8, 16), pad=True, axis="seq"), dynamic_axes=source.get_dynamic_axes())


@pytest.fixture(scope="module")
def seq_buckets_dynamic_batch(tmp_path_factory):
    module = zoo.model_file("bert")
    model = module.get_model().eval()
    shapes = Buckets((16, 32), pad=True, axis="seq", dynamic=Dynamic(batch=(1, 4)))
    result = build_package(model, module.get_example_inputs(), arch=["sm_90"], name="bert_seq_batch",
                           out=tmp_path_factory.mktemp("seqbatch"), cache=False, jobs=1, shapes=shapes,
                           dynamic_axes=module.get_dynamic_axes())
    return model, result


@pytest.mark.parametrize("bucket,batch,seq", [(0, 1, 16), (0, 3, 11), (1, 4, 32), (1, 2, 17), (1, 1, 29)])
def test_bucketed_seq_with_a_dynamic_batch(seq_buckets_dynamic_batch, bucket, batch, seq):
    """``--buckets seq=16,32 --pad --dynamic batch=1:4``: a trace per seq bucket, each with a
    symbolic batch; any batch in range at any seq padded into its bucket matches eager."""
    model, result = seq_buckets_dynamic_batch
    shapes = result.manifest.shapes
    assert (shapes.axis, shapes.sizes, shapes.dynamic.ranges) == ("seq", (16, 32), {"batch": (1, 4)})
    assert [i.shape for i in result.manifest.specialization(16).inputs] == [("batch", 16), ("batch", 16)]
    size = shapes.sizes[bucket]
    ids, mask = _inputs(batch, seq, 1000, seed=batch * 100 + seq)
    padded = tuple(torch.cat([t, t.new_zeros(batch, size - seq)], 1) for t in (ids, mask))
    got = leaves(interpret.run_variant(result, bucket, padded))
    with torch.no_grad():
        ref = leaves(model(ids, mask))
    assert got[0].shape == (batch, size, ref[0].shape[-1])
    assert relative_error(got[0][:, :seq], ref[0]) <= 1e-4 and relative_error(got[1], ref[1]) <= 1e-4


def test_an_axis_both_bucketed_and_dynamic_is_refused():
    from aotcombo.builder.inputs import options

    with pytest.raises(UsageError, match="axis seq is both bucketed and dynamic"):
        options.check_shapes(Buckets((16, 32), axis="seq", dynamic=Dynamic(seq=(1, 64))))
    assert options.check_shapes(Buckets((32, 16), axis="seq", dynamic=Dynamic(batch=(1, 4)))).sizes == (16, 32)
