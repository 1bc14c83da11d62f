"""The call a user writes, ``y = m(x)``, on a GPU: the default load answers its first call op by
op and captures at the second; inputs only the package's kernels read are not copied in;
inputs of any strides or alignment are right in both modes; keywords; a damaged package
is refused at load with the file named.

Tolerances: those of aotcombo.testing.compare.compare (relative L2: 1e-4 fp32, 1e-2 bf16/fp16).
Run on a machine with a GPU through ``scripts/gpu_check.sh``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from aotcombo.testing.compare import compare
from aotcombo.testing.gpu import fresh_like, import_package

pytestmark = pytest.mark.gpu


def _check(name, got, ref, what):
    for error, tolerance in compare(got, ref):
        assert error <= tolerance, f"{name} ({what}): relative L2 error {error:.2e} > {tolerance:.0e}"


def _eager(model, inputs):
    with torch.no_grad():
        return model(*inputs)


def test_default_load_answers_first_then_captures(sample):
    name, model, example = sample
    loaded = import_package(name).load("cuda")
    generator = torch.Generator(device="cuda").manual_seed(7)
    for call in range(4):
        inputs = [fresh_like(t, generator) for t in example]
        _check(name, loaded(*inputs), _eager(model, inputs), f"call {call}")
        assert (loaded._graph is None) is (call == 0), "op by op first, captured at the second call"


def test_direct_inputs_are_read_in_place(sample):
    """Inputs only the package's kernels read are not copied: the static buffers keep their
    contents through calls with the caller's tensors, and each answer is the caller's."""
    name, model, example = sample
    package = import_package(name)
    direct = [i for i, spec in enumerate(package.manifest.inputs) if spec.direct]
    loaded = package.load("cuda", graphs=True)
    static = loaded.static_inputs()
    generator = torch.Generator(device="cuda").manual_seed(11)
    for s, t in zip(static, example):
        s.copy_(fresh_like(t, generator))
    kept = [s.clone() for s in static]
    print(f"\n{name}: {len(direct)} of {len(static)} inputs read in place "
          f"(re-pointed: {loaded._repoint is not None})")
    if direct:
        assert loaded._repoint is not None and loaded._repoint.inputs == direct
    for trial in range(3):
        inputs = [fresh_like(t, generator) for t in example]
        _check(name, loaded(*inputs), _eager(model, inputs), f"caller's tensors, trial {trial}")
        for i in direct:
            assert torch.equal(static[i], kept[i]), f"input {i} was copied into its static buffer"
        for s, k in zip(static, kept):  # then the static inputs themselves: pointed back at them
            s.copy_(k)
        _check(name, loaded(*static), _eager(model, list(static)), f"static inputs, trial {trial}")


def test_recurring_inputs_are_read_in_place_by_graphs_bound_to_them(sample):
    """Input tensors that come back (refilled in place, or new ones where the allocator puts
    them) get graphs bound to their addresses (runtime/bound.py): each answer is right, and
    outputs the caller keeps are never overwritten."""
    name, model, example = sample
    loaded = import_package(name).load("cuda")
    generator = torch.Generator(device="cuda").manual_seed(17)
    sets = [[fresh_like(t, generator) for t in example] for _ in range(3)]
    kept = []
    for round_ in range(4):
        for k, inputs in enumerate(sets):
            for t in inputs:
                t.copy_(fresh_like(t, generator))
            got = loaded(*inputs)
            ref = _eager(model, inputs)
            _check(name, got, ref, f"round {round_}, input set {k}")
            if round_ == 2:
                kept.append((got, ref))
    guard = type(loaded._bound._guard).__name__
    print(f"\n{name}: {len(loaded._bound)} graphs bound to recurring inputs, checked by {guard}")
    assert len(loaded._bound) >= 3, "each recurring input set has a graph of its own"
    if (Path(import_package(name).__file__).parent / "_runtime" / "_guard.abi3.so").exists():  # the native wheel
        assert guard == "Guard", f"the C guard is not used with torch {torch.__version__}"
    for k, (got, ref) in enumerate(kept):
        _check(name, got, ref, f"output of input set {k} kept through later calls")
    for call in range(6):
        inputs = [fresh_like(t, generator) for t in example]
        _check(name, loaded(*inputs), _eager(model, inputs), f"new tensors, call {call}")


def test_static_outputs_with_recurring_inputs(sample):
    """``copy_outputs=False`` with the caller's recurring tensors: graphs bound to them write the
    main graph's own outputs (the same tensors every call), and each answer is right."""
    name, model, example = sample
    loaded = import_package(name).load("cuda", copy_outputs=False)
    generator = torch.Generator(device="cuda").manual_seed(23)
    sets = [[fresh_like(t, generator) for t in example] for _ in range(2)]
    pointers = set()
    for round_ in range(4):
        for k, inputs in enumerate(sets):
            got = loaded(*inputs)
            _check(name, got, _eager(model, inputs), f"round {round_}, input set {k}")
            if round_:
                pointers.add(tuple(t.data_ptr() for t in (got if isinstance(got, tuple) else [got])))
    assert len(loaded._bound) == 2 and len(pointers) == 1, "bound graphs write the static outputs"


def test_inputs_changed_in_place_after_binding(sample):
    """Inputs a graph is bound to, then moved in place (``set_``, ``.data =``, ``swap_tensors``:
    the same tensor objects at new addresses, the last two without a version bump): each
    answer is right, never the graph's read of the old addresses (runtime/bound.py)."""
    name, model, example = sample
    loaded = import_package(name).load("cuda")
    generator = torch.Generator(device="cuda").manual_seed(19)
    inputs = [fresh_like(t, generator) for t in example]
    for call in range(4):  # op by op, then the main graph's capture, then the addresses seen twice: bound
        _check(name, loaded(*inputs), _eager(model, inputs), f"before, call {call}")
    assert len(loaded._bound) >= 1
    moves = {"set_": lambda t, new: t.set_(new), ".data =": lambda t, new: setattr(t, "data", new),
             "swap_tensors": lambda t, new: torch.utils.swap_tensors(t, new)}
    for what, move in moves.items():
        for t in inputs:
            before = t.data_ptr()
            move(t, fresh_like(t, generator))
            assert t.data_ptr() != before or t.numel() == 0
        for call in range(3):
            _check(name, loaded(*inputs), _eager(model, inputs), f"after {what}, call {call}")


@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "op_by_op"])
def test_any_strides_and_alignment(sample, graphs):
    name, model, example = sample
    loaded = import_package(name).load("cuda", graphs=graphs)
    generator = torch.Generator(device="cuda").manual_seed(13)
    for what in ("transposed", "misaligned"):
        inputs = []
        for t in example:
            fresh = fresh_like(t, generator)
            if what == "transposed" and fresh.dim() >= 2:
                fresh = fresh.transpose(0, 1).contiguous().transpose(0, 1)
            elif what == "misaligned":
                fresh = torch.empty(fresh.numel() + 1, dtype=fresh.dtype, device="cuda")[1:].view(fresh.shape) \
                    .copy_(fresh)
            inputs.append(fresh)
        _check(name, loaded(*inputs), _eager(model, inputs), what)


def test_keywords_and_names():
    package = import_package("transformer_block")
    names = [i.name for i in package.manifest.inputs]
    assert names == ["x"] and "model(x)" in package.__doc__
    for options in ({}, {"graphs": False}):
        loaded = package.load("cuda", **options)
        x = torch.randn(4, 256, 768, dtype=torch.bfloat16, device="cuda")
        # graph mode's first call runs op by op, its attention without cuDNN (no plan built for
        # one call): its rounding may differ from the replays' by an ulp; compare two replays
        first = loaded(x)
        assert torch.equal(loaded(x=x), loaded(x))
        torch.testing.assert_close(first, loaded(x), rtol=1e-2, atol=1e-2)
        with pytest.raises(TypeError, match=r"unexpected input 'y': the model's inputs are x"):
            loaded(y=x)


def test_a_damaged_kernel_image_is_refused_at_load(tmp_path):
    """Bytes overwritten in the middle of a cubin: a clear error naming the file, at load,
    and the process's CUDA context still works."""
    package = import_package("transformer_block")
    copy = tmp_path / "transformer_block"
    shutil.copytree(package._package.dir, copy)
    kernel = package.manifest.specializations[0].variants["sm_90"].kernels[0]
    image = copy / kernel.image
    data = bytearray(image.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = b"\xff" * 64
    image.write_bytes(bytes(data))
    runtime = type(package._package)
    with pytest.raises(RuntimeError, match=rf"{image}: its sha256 is not the one the manifest records: the "
                                           r"package is damaged"):
        runtime(copy, "transformer_block").load("cuda")
    assert torch.ones(4, device="cuda").sum().item() == 4
