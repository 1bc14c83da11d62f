"""The C guard of bound graphs (aotcombo/runtime/_guard.c, through runtime/torch_private.py) without a
GPU: what it accepts and refuses, the pointer sets it remembers, and when the runtime does
not trust it. Its use by bound graphs is in test_bound.py (run with it and without)."""

from __future__ import annotations

import pytest
import torch

from aotcombo.runtime import torch_private


@pytest.fixture
def ext(monkeypatch):
    from aotcombo.testing.native import compiled

    module = compiled("_guard")
    monkeypatch.setattr(torch_private, "_guard", module)
    return module


def _templates():
    return (torch.zeros(4, 8), torch.zeros(3, dtype=torch.float16), torch.zeros(2, 1, 5, dtype=torch.int64))


def _like(templates):
    return tuple(torch.randn(t.shape).to(t.dtype) for t in templates)


def test_accepts_the_built_layout_and_remembers_pointer_sets(ext):
    templates = _templates()
    guard = torch_private.native_guard(templates, capacity=2)
    first, second = _like(templates), _like(templates)
    assert guard(first) == -1 and guard.pointers() == tuple(t.data_ptr() for t in first)
    assert guard.remember() == 0 and guard(first) == 0
    assert guard(second) == -1 and guard.remember() == 1 and guard(second) == 1 and guard(first) == 0
    assert guard(_like(templates)) == -1
    with pytest.raises(ValueError, match="all 2 pointer sets are in use"):
        guard.remember()
    guard.forget(0)
    assert guard(first) == -1 and guard(second) == 1
    with pytest.raises(IndexError):
        guard.forget(2)


def test_accepts_parameters_inference_tensors_and_strides_that_address_alike(ext):
    templates = _templates()
    guard = torch_private.native_guard(templates, capacity=4)
    a, b, c = _like(templates)
    assert guard((torch.nn.Parameter(a), b, c)) == -1
    with torch.inference_mode():
        made_here = _like(templates)
    assert guard(made_here) == -1
    size_one = torch.randn(2, 5, 1).to(torch.int64).transpose(1, 2)  # [2, 1, 5]: the size-1 dim's stride differs
    assert size_one.stride() != c.stride() and guard((a, b, size_one)) == -1
    empty = torch_private.native_guard((torch.zeros(0, 3),), capacity=1)
    assert empty((torch.zeros(3, 0).t(),)) == -1  # no element: any strides


def _refused(a, b, c):
    class Sub(torch.Tensor):
        pass

    yield "another shape", (torch.randn(4, 9), b, c)
    yield "another dtype", (a.double(), b, c)
    yield "other strides", (torch.randn(8, 4).t(), b, c)
    yield "a view with other strides", (torch.randn(4, 16)[:, ::2], b, c)
    yield "one input too few", (a, b)
    yield "one input too many", (a, b, c, c)
    yield "not a tensor", (a, 3, c)
    yield "a subclass", (a.as_subclass(Sub), b, c)
    yield "on the meta device", (a.to("meta"), b, c)
    yield "sparse", (a.to_sparse(), b, c)
    yield "another number of dims", (a.unsqueeze(0), b, c)
    yield "nested", (torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(2, 8)], layout=torch.jagged), b, c)


@pytest.mark.parametrize("case", range(12))
def test_refuses(ext, case):
    templates = _templates()
    guard = torch_private.native_guard(templates, capacity=2)
    name, inputs = list(_refused(*_like(templates)))[case]
    assert guard(inputs) == -2, name


def test_reads_the_addresses_torch_does(ext):
    """Views with a storage offset, and tensors whose storage was swapped in place."""
    base = torch.randn(64)
    x = base[8:12]
    guard = torch_private.native_guard((torch.zeros(4),), capacity=1)
    assert guard((x,)) == -1 and guard.pointers() == (x.data_ptr(),)
    x.set_(torch.randn(4))
    assert guard((x,)) == -1 and guard.pointers() == (x.data_ptr(),)
    x.data = torch.randn(4)
    assert guard((x,)) == -1 and guard.pointers() == (x.data_ptr(),)


def test_trusted_here_and_not_where_it_cannot_be(ext, monkeypatch):
    assert torch_private.tensors_hold_their_impl() and torch_private.shim_functions() is not None
    assert torch_private.native_guard((torch.zeros(2),), 1) is not None
    assert torch_private.native_guard((torch.zeros(2, dtype=torch.complex64),), 1) is None  # conjugate views
    monkeypatch.setattr(torch_private, "OFFSET", 3 * 8)  # another object layout: _cdata disagrees
    assert not torch_private.tensors_hold_their_impl.__wrapped__()
    monkeypatch.setattr(torch_private, "tensors_hold_their_impl", lambda: False)
    assert torch_private.native_guard((torch.zeros(2),), 1) is None
    monkeypatch.undo()
    monkeypatch.setattr(torch_private, "_guard", None)
    assert torch_private.native_guard((torch.zeros(2),), 1) is None  # the pure wheel


def test_refcounts(ext):
    tensors = [torch.zeros(1), torch.zeros(2)]
    counts = ext.refcounts(tensors)
    assert ext.same_refcounts(tensors, counts)
    held = tensors[1]
    assert not ext.same_refcounts(tensors, counts)
    del held
    assert ext.same_refcounts(tensors, counts) and not ext.same_refcounts(tensors[:1], counts)
