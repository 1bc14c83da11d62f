"""Traces side by side (``trace/forked.py``): a size class's, or the next arch's, trace in a forked
child gives the same program as in this process; a child that fails or hangs is stopped and its
trace made here, with a note; and ``forked.Child`` on its own."""

import os
import sys
import time

import pytest
import torch
from torch import nn

from aotcombo import progress
from aotcombo.builder.pipeline import build_package
from aotcombo.builder.trace import cached, entry, forked
from aotcombo.runtime.manifest import Dynamic

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children are forked on Linux only")


def _value():
    return {"pid": os.getpid(), "tensor": torch.arange(3)}


def _fails():
    raise ValueError("bad class")


def _hangs():
    time.sleep(60)


def test_a_child_returns_its_value():
    value, why = forked.Child(_value).result(30)
    assert why is None and value["pid"] != os.getpid() and value["tensor"].tolist() == [0, 1, 2]


def test_a_child_that_fails_says_why():
    value, why = forked.Child(_fails).result(30)
    assert value is None and why == "ValueError: bad class"


def test_a_child_past_its_time_is_stopped():
    child = forked.Child(_hangs)
    pid, started = child.pid, time.monotonic()
    value, why = child.result(0.5)
    assert value is None and why == "no answer in 0 s" and time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(128), nn.Linear(128, 512), nn.Linear(512, 128)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def _build(tmp_path, name, reporter=None, archs=("sm_90",)):
    torch.manual_seed(0)
    model = Block().eval()
    result = build_package(model, (torch.randn(2, 5, 128),), arch=list(archs), name=name, out=tmp_path / name,
                           shapes=Dynamic(batch=(1, 4), seq=(1, 16)), dynamic_axes={"x": {0: "batch", 1: "seq"}},
                           cache=False, jobs=1, reporter=reporter)
    return [(v.max_tokens, v.program, v.plan.graph) for v in result.variants], result.weights


class Notes(progress.Reporter):
    def __init__(self):
        super().__init__(quiet=True)
        self.notes = []

    def detail(self, text):
        self.notes.append(text)


@pytest.fixture(scope="module")
def one_after_the_other(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(forked.DISABLE, "1")
        return _build(tmp_path_factory.mktemp("serial"), "serial")


def _same(built, reference):
    (variants, weights), (ref_variants, ref_weights) = built, reference
    assert len(variants) == len(ref_variants) and len(variants) in (2, 4)
    for (tokens, program, graph), (ref_tokens, ref_program, ref_graph) in zip(variants, ref_variants):
        assert tokens == ref_tokens
        assert program.replace("forked", "serial") == ref_program and graph == ref_graph
    assert len(weights) == len(ref_weights) and all(torch.equal(a, b) for a, b in zip(weights, ref_weights))


def test_classes_traced_side_by_side_as_one_after_the_other(tmp_path, one_after_the_other, monkeypatch):
    assert forked.available() or os.cpu_count() == 1
    children = []
    original = forked.Child.__init__

    def counted(self, fn):
        children.append(fn)
        original(self, fn)

    monkeypatch.setattr(forked.Child, "__init__", counted)
    _same(_build(tmp_path, "forked"), one_after_the_other)
    assert len(children) == (1 if forked.available() else 0)


@pytest.mark.parametrize("trouble", ["fails", "hangs"])
def test_a_class_whose_child_failed_is_traced_here(tmp_path, one_after_the_other, monkeypatch, trouble):
    if not forked.available():
        pytest.skip("one CPU: no child")
    parent = os.getpid()

    def as_plain(*args):
        if os.getpid() != parent:  # in the child only
            _fails() if trouble == "fails" else _hangs()
        raise AssertionError("the parent never runs a child's part")

    monkeypatch.setattr(entry, "_as_plain", as_plain)
    monkeypatch.setattr(forked, "wait_seconds", lambda own: 2.0)
    reporter = Notes()
    _same(_build(tmp_path, "forked", reporter), one_after_the_other)
    why = "ValueError: bad class" if trouble == "fails" else "no answer in 2 s"
    assert any(f"failed ({why}); tracing them here" in note for note in reporter.notes), reporter.notes


@pytest.fixture(scope="module")
def two_archs_one_after_the_other(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(forked.DISABLE, "1")
        return _build(tmp_path_factory.mktemp("serial2"), "serial", archs=("sm_80", "sm_90"))


def test_the_next_arch_traced_beside_as_one_after_the_other(tmp_path, two_archs_one_after_the_other, monkeypatch):
    if not forked.available():
        pytest.skip("one CPU: no child")
    started = []
    original = cached.trace_beside

    def counted(*args, **kwargs):
        started.append(args[2])  # the arch
        return original(*args, **kwargs)

    monkeypatch.setattr("aotcombo.builder.pipeline.trace_beside", counted)
    _same(_build(tmp_path, "forked", archs=("sm_80", "sm_90")), two_archs_one_after_the_other)
    assert started == [90]


def test_an_arch_whose_child_failed_is_traced_here(tmp_path, two_archs_one_after_the_other, monkeypatch):
    if not forked.available():
        pytest.skip("one CPU: no child")
    parent, original = os.getpid(), entry.trace_classes

    def trace_classes(*args, **kwargs):
        if os.getpid() != parent:
            _fails()
        return original(*args, **kwargs)

    monkeypatch.setattr(entry, "trace_classes", trace_classes)
    reporter = Notes()
    _same(_build(tmp_path, "forked", reporter, archs=("sm_80", "sm_90")), two_archs_one_after_the_other)
    assert any("sm_90" in n and "failed (ValueError: bad class); tracing it here" in n for n in reporter.notes), \
        reporter.notes


def test_a_failed_build_stops_the_child_tracing_beside_it(tmp_path, monkeypatch):
    if not forked.available():
        pytest.skip("one CPU: no child")
    children = []
    original = forked.Child.__init__

    def kept(self, fn):
        original(self, fn)
        children.append(self)

    def fails(*args, **kwargs):
        raise ValueError("the first arch's plan")

    monkeypatch.setattr(forked.Child, "__init__", kept)
    monkeypatch.setattr("aotcombo.builder.pipeline._variant", fails)
    with pytest.raises(ValueError, match="the first arch's plan"):
        _build(tmp_path, "fails", archs=("sm_80", "sm_90"))
    assert len(children) == 1 and children[0].pid is None  # stopped and reaped
