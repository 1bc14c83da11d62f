"""Dynamic axes on a GPU: BERT-base (full size, fp16) built once with ``--dynamic
batch=1:32,seq=1:512`` and the zoo's T5 encoder (fp32) with ``batch=1:8,seq=1:128`` serve every
(batch, seq) in range. Each is checked against eager on fresh inputs whose rows are padded to
lengths of their own, at 40 (batch, seq) pairs that include the range ends, primes and
off-by-one lengths, in graph mode (a graph per size: each pair's first call runs op by op, the
second captures, the third replays) and op by op. Tolerances (aotcombo.testing.zoo.check):
fp32 relative L2 1e-4; fp16 max(1e-2, 2 x eager's own error against float32 eager).
Also: sizes out of range and inputs that disagree on an axis are refused with errors naming
the input, the axis and the range; and the packages built for exactly the benchmark's shapes
(``full_bert_base_b<B>_s<S>``, which ``benchmarks/axes_bench.py`` times beside the dynamic one)
match eager at their shape. Wheels: ``scripts/build_axes.py``.
"""

import pytest
import torch

from aotcombo.testing.gpu import import_package
from aotcombo.testing.zoo import FULL_SIZE_DIR, as_float32, assert_all_ok, check, eager_model, model_file

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("full_fp32")]

BATCHES = {"bert_base": (1, 2, 7, 31, 32), "t5_encoder": (1, 2, 3, 7, 8)}
SEQS = {"bert_base": (1, 7, 77, 128, 129, 383, 511, 512), "t5_encoder": (1, 2, 7, 31, 64, 65, 127, 128)}
PACKAGES = {"bert_base": ("full_bert_base_dyn", FULL_SIZE_DIR), "t5_encoder": ("zoo_t5_encoder_dyn", None)}
EXACT_SHAPES = ((1, 7), (1, 128), (2, 77), (4, 129), (8, 128), (8, 383), (16, 256), (32, 512))  # build_axes.py's


def padded_inputs(batch: int, seq: int, vocab: int, seed: int) -> tuple:
    """Token ids and a padding mask: each row but the first padded after a length of its own."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    for b in range(1, batch):
        mask[b, int(torch.randint(1, seq + 1, (1,), generator=g)):] = 0
    return ids.cuda(), mask.cuda()


@pytest.fixture(scope="module", params=list(PACKAGES))
def dynamic(request):
    name = request.param
    package_name, folder = PACKAGES[name]
    package = import_package(package_name)
    if folder is not None:  # built with --weights external: both take the model's own weights
        eager = model_file(name, folder).get_model(device="cuda")
        weights = eager.state_dict()
    else:  # the package's weights, given to eager
        eager, weights = eager_model(name, package), None
    return name, package, eager, weights, eager.model.config.vocab_size


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_every_size_in_range_matches_eager(dynamic, graphs):
    name, package, eager, weights, vocab = dynamic
    loaded = package.load("cuda", graphs=graphs, weights=weights, capture_after=2)
    model32 = as_float32(eager, ())[0] if next(eager.parameters()).dtype != torch.float32 else None
    report, pairs = [], [(b, s) for b in BATCHES[name] for s in SEQS[name]]
    assert len(pairs) >= 40
    for batch, seq in pairs:
        inputs = padded_inputs(batch, seq, vocab, seed=batch * 1000 + seq)
        with torch.no_grad():
            ref = eager(*inputs)
            ref32 = model32(*inputs) if model32 is not None else None
        for call in range(3 if graphs else 1):  # op by op, the capture, a replay
            rows = check(loaded(*inputs), ref, ref32)
            report += [{"model": name, "graphs": graphs, "batch": batch, "seq": seq, "call": call, **r} for r in rows]
    assert_all_ok(report, "dynamic_axes_check.jsonl")
    if graphs:
        assert len(loaded.sizes()) == len(pairs)


def test_sizes_the_package_was_not_built_for_are_refused(dynamic):
    name, package, eager, weights, vocab = dynamic
    loaded = package.load("cuda", weights=weights)
    top_batch, top_seq = BATCHES[name][-1], SEQS[name][-1]
    with pytest.raises(ValueError, match=rf"'input_ids'\): seq size {top_seq + 1} is outside the range "
                                         rf"1\.\.{top_seq} the package was built for"):
        loaded(*padded_inputs(2, top_seq + 1, vocab, seed=1))
    with pytest.raises(ValueError, match=rf"batch size {top_batch + 1} is outside the range 1\.\.{top_batch}"):
        loaded(*padded_inputs(top_batch + 1, 8, vocab, seed=1))
    ids, mask = padded_inputs(2, 9, vocab, seed=1)
    with pytest.raises(ValueError, match=r"'attention_mask'\): seq size 8, but input 0 \('input_ids'\) has 9"):
        loaded(ids, mask[:, :8])


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_sequence_buckets_pad_exactly(graphs):
    """BERT-base with ``--buckets seq=16,32,64,128 --pad --dynamic batch=1:8``: lengths between
    buckets run padded with zeros (ids and mask) in the next bucket, the hidden states cut back;
    in each bucket the batch is a symbolic size (a graph per batch size in graph mode)."""
    eager = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda")
    loaded = import_package("full_bert_base_seq").load("cuda", graphs=graphs, weights=eager.state_dict(),
                                                       capture_after=2)
    model32 = as_float32(eager, ())[0]
    report = []
    for seq in (1, 7, 16, 17, 31, 64, 100, 128):
        for batch in (1, 3, 8):
            inputs = padded_inputs(batch, seq, 30522, seed=seq * 10 + batch)
            with torch.no_grad():
                ref, ref32 = eager(*inputs), model32(*inputs)
            for call in range(3 if graphs else 1):
                rows = check(loaded(*inputs), ref, ref32)
                report += [{"model": "bert_base_seq", "graphs": graphs, "seq": seq, "batch": batch, "call": call,
                            **r} for r in rows]
    assert_all_ok(report, "dynamic_axes_check.jsonl")
    with pytest.raises(ValueError, match=r"seq size 129 is not one this package was built for"):
        loaded(*padded_inputs(8, 129, 30522, seed=1))
    with pytest.raises(ValueError, match=r"batch size 9 is outside the range 1\.\.8"):
        loaded(*padded_inputs(9, 16, 30522, seed=1))


@pytest.mark.parametrize("batch,seq", EXACT_SHAPES, ids=[f"{b}x{s}" for b, s in EXACT_SHAPES])
def test_exact_shape_packages_match_eager(batch, seq):
    """Each package built for one (batch, seq), padded rows and all, in graph mode: the op-by-op
    first call, the capture, a replay."""
    eager = model_file("bert_base", FULL_SIZE_DIR).get_model(device="cuda")
    loaded = import_package(f"full_bert_base_b{batch}_s{seq}").load("cuda", weights=eager.state_dict())
    model32 = as_float32(eager, ())[0]
    report = []
    for seed in (1, 2):
        inputs = padded_inputs(batch, seq, 30522, seed=seed * 7919 + batch * 1000 + seq)
        with torch.no_grad():
            ref, ref32 = eager(*inputs), model32(*inputs)
        for call in range(3):
            report += [{"model": f"bert_base_b{batch}_s{seq}", "seed": seed, "call": call, **r}
                       for r in check(loaded(*inputs), ref, ref32)]
    assert_all_ok(report, "dynamic_axes_check.jsonl")
