"""The runtime shipped in every generated package (aotcombo/runtime), on the CPU (a stand-in driver
where one is needed); its driver calls on a GPU are tests/gpu/test_gpu_launch.py."""

import contextlib
import ctypes
import dataclasses
import json
import re
import shutil
import struct
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from aotcombo.runtime import cuda, graphs, loader as package
from aotcombo.runtime.graphs import GraphModel, StreamOrder, same_tensors
from aotcombo.runtime.outputs import FOREACH_FROM, OutputSlots, copy_into, flatten, unflatten, unflattener
from aotcombo.runtime.inputs import bind, check_inputs, make_input_check
from aotcombo.runtime.loader import Loaded, Model, Package, check_options, choose_variant
from aotcombo.runtime.manifest import Dynamic
from aotcombo.runtime.state import State

from aotcombo.testing import manifests
from aotcombo.testing.gpu import run_threads

RUNTIME = Path(__file__).parents[2] / "aotcombo" / "runtime"


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


# --- choose_variant ---------------------------------------------------------------

def _manifest(archs, ptx_arch):
    return manifests.manifest("mymodel", archs, ptx_arch if ptx_arch is not None else 80, ptx=ptx_arch is not None)


@pytest.mark.parametrize("archs, ptx, arch, expected", [
    ([80, 90], 80, 80, "sm_80"),          # exact
    ([80, 90], 80, 90, "sm_90"),          # exact
    ([80, 90], 80, 86, "sm_80"),          # same major, lower minor
    ([80, 86, 90], None, 89, "sm_86"),    # the highest such
    ([80, 90], 80, 100, "ptx"),           # sm_90(a) is exact-only: PTX instead
    ([80, 90], 80, 120, "ptx"),
    ([86], 80, 80, "ptx"),                # cubins never run on a lower minor
    ([100], 80, 103, "ptx"),              # sm_100a cubins are exact-only too
    ([], 90, 90, "ptx"),                  # sm_90a PTX runs on sm_90 only
])
def test_choose_variant(archs, ptx, arch, expected):
    assert choose_variant(_manifest(archs, ptx), arch) == expected


@pytest.mark.parametrize("archs, ptx, arch", [([80, 90], 80, 75), ([90], None, 100), ([], 90, 100), ([90], None, 91)])
def test_choose_variant_none_fits(archs, ptx, arch):
    with pytest.raises(RuntimeError, match=f"this device .* is sm_{arch}: rebuild with --arch sm_{arch}"):
        choose_variant(_manifest(archs, ptx), arch, "NVIDIA X")


def test_choose_variant_message():
    with pytest.raises(RuntimeError) as e:
        choose_variant(_manifest([80, 90], 80), 75, "NVIDIA X")
    assert str(e.value) == ("package mymodel has cubins for sm_80, sm_90 and PTX for sm_80+; "
                            "this device (NVIDIA X) is sm_75: rebuild with --arch sm_75")
    with pytest.raises(RuntimeError, match="has cubins for sm_90 and no PTX"):
        choose_variant(_manifest([90], None), 80)


# --- input guards: check_inputs (the message) and make_input_check (the per-call check) ------

SPECS = manifests.specs(*[
    {"name": "x", "shape": [64, 256], "stride": [256, 1], "dtype": "bfloat16", "align": 16},
    {"name": "n", "shape": [4], "stride": [1], "dtype": "int64", "align": 16},
])
CPU = torch.device("cpu")


def _good():
    return torch.zeros(64, 256, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.int64)


@pytest.fixture(params=["check_inputs", "make_input_check"])
def guard(request):
    """Both guards: the detailed check and the fast per-call one, which must say the same."""
    if request.param == "check_inputs":
        return lambda inputs, device=CPU: check_inputs(SPECS, inputs, device)
    return lambda inputs, device=CPU: make_input_check(SPECS, device)(inputs)


def test_guards_pass(guard):
    guard(_good())
    check_inputs(SPECS, _good())  # device=None: no device check


def test_guard_count(guard):
    for inputs, got in (((_good()[0],), 1), ((*_good(), _good()[1]), 3), ((), 0)):
        with pytest.raises(ValueError, match=rf"expected 2 inputs \(x, n\), got {got}$"):
            guard(inputs)


@pytest.mark.parametrize("value, kind", [([[0.0]], "list"), (3, "int"), (None, "NoneType")])
def test_guard_type(guard, value, kind):
    with pytest.raises(TypeError, match=rf"input 0 \('x'\): expected a torch.Tensor, got {kind}$"):
        guard((value, _good()[1]))


def test_guard_device(guard):
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected device cuda:0, got cpu$"):
        guard(_good(), torch.device("cuda", 0))


def test_guard_dtype(guard):
    x, n = _good()
    with pytest.raises(TypeError, match=r"input 0 \('x'\): expected dtype torch.bfloat16, got torch.float32$"):
        guard((x.float(), n))
    with pytest.raises(TypeError, match=r"input 1 \('n'\): expected dtype torch.int64, got torch.int32$"):
        guard((x, n.int()))


def test_guard_shape(guard):
    x, n = _good()
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected shape \(64, 256\), got \(64, 255\)$"):
        guard((x[:, :255], n))
    with pytest.raises(ValueError, match=r"input 1 \('n'\): expected shape \(4,\), got \(1, 4\)$"):
        guard((x, n[None]))


def test_guard_stride(guard):
    x, n = _good()
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected stride \(256, 1\), got \(1, 64\)$"):
        guard((x.t().contiguous().t(), n))


def test_guard_alignment(guard):
    x, n = _good()
    with pytest.raises(ValueError, match=r"input 1 \('n'\): expected data_ptr aligned to 16 bytes, "
                                         r"got one 8 bytes past \(storage offset 1\)$"):
        guard((x, torch.zeros(5, dtype=torch.int64)[1:]))
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected data_ptr aligned to 16 bytes, "
                                         r"got one 2 bytes past \(storage offset 1\)$"):
        guard((torch.zeros(64 * 256 + 1, dtype=torch.bfloat16)[1:].view(64, 256), n))


def test_guard_ignores_the_stride_of_a_dim_of_size_one():
    specs = manifests.specs({"name": "tokens", "shape": [1, 1], "stride": [1, 1], "dtype": "int64", "align": 16})
    last = torch.zeros(1, 64, dtype=torch.int64)[:, -1:].clone()  # 16-byte aligned, stride (1, 1)
    sliced = torch.zeros(1, 64, dtype=torch.int64)[:, :1]  # stride (64, 1): the same layout
    for guard in (make_input_check(specs, CPU), make_input_check(specs, CPU, exact_layout=False)):
        assert guard((last,)) is True and guard((sliced,)) is True


def test_graph_mode_guard_takes_any_layout():
    x, n = _good()
    lenient = make_input_check(SPECS, CPU, exact_layout=False)
    assert lenient((x, n)) is True
    assert lenient((x.t().contiguous().t(), n)) is False  # copied in, not refused
    assert lenient((x, torch.zeros(5, dtype=torch.int64)[1:])) is False
    with pytest.raises(ValueError, match=r"expected shape"):
        lenient((x[:, :255], n))  # what a copy cannot fix is still refused


def test_bind_keywords():
    names = ["input_ids", "attention_mask"]
    a, b = torch.ones(1), torch.zeros(1)
    assert bind(names, (a,), {"attention_mask": b}) == (a, b)
    assert bind(names, (), {"attention_mask": b, "input_ids": a}) == (a, b)
    with pytest.raises(TypeError, match=r"unexpected input 'mask': the model's inputs are input_ids, attention_mask"):
        bind(names, (a,), {"mask": b})
    with pytest.raises(TypeError, match=r"input 'input_ids' given by position and by name"):
        bind(names, (a,), {"input_ids": b})
    with pytest.raises(TypeError, match=r"missing input 'attention_mask'$"):
        bind(names, (a,), {})
    with pytest.raises(TypeError, match=r"unexpected input 'xs\[0\]'"):
        bind(["xs[0]"], (), {"xs[0]": a})  # the inputs of a *xs go by position only


def test_guard_fast_path(monkeypatch):
    from aotcombo.runtime import inputs

    guard = make_input_check(SPECS, CPU)
    monkeypatch.setattr(inputs, "check_inputs", lambda *a: pytest.fail("matching inputs took the slow path"))
    guard(_good())
    guard([*_good()])


# --- load options -------------------------------------------------------------------

STATIC = manifests.manifest()
DYNAMIC = manifests.manifest(shapes=Dynamic(1, 8, (0,)), ins=manifests.inputs(
    {"name": "x", "shape": ["batch", 8], "stride": [8, 1], "dtype": "float32"}))


@pytest.mark.parametrize("options, message", [
    ((1, True, True), r"load\(\): graphs must be True, False or None, got 1$"),
    ((None, "yes", True), r"load\(\): copy_outputs must be True or False, got 'yes'$"),
    ((None, True, None), r"load\(\): check_inputs must be True or False, got None$"),
])
def test_check_options_types(options, message):
    with pytest.raises(TypeError, match=message):
        check_options(*options)


@pytest.mark.parametrize("options, message", [
    ((None, True, True, 0), r"load\(\): max_graphs must be a whole number from 1, got 0 "),
    ((None, True, True, 64, 1), r"load\(\): capture_after must be a whole number from 2, got 1 "),
    ((None, True, True, True), r"load\(\): max_graphs must be a whole number from 1, got True "),
])
def test_check_graph_budget(options, message):
    with pytest.raises(ValueError, match=message):
        check_options(*options)


def test_load_checks_options_first(tmp_path):
    (tmp_path / "manifest.json").write_text(STATIC.to_json())
    with pytest.raises(TypeError, match="copy_outputs must be True or False"):
        Package(tmp_path).load("cuda", copy_outputs=None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'graph'"):
        Package(tmp_path).load("cuda", graph=True)
    with pytest.raises(TypeError, match="positional"):
        Package(tmp_path).load("cuda", True)


def test_load_modes(tmp_path, monkeypatch):
    """load()'s choices, with the device, the loading and the capture faked."""
    (tmp_path / "manifest.json").write_text(STATIC.to_json())
    loads, captures = [], []
    specs = [package.InputSpec.of(i) for i in STATIC.inputs]
    loaded = Loaded("m", "sm_90", torch.device("cuda", 0), 1, None, [], specs)
    monkeypatch.setattr(package, "_device_index", lambda device: 0)
    monkeypatch.setattr(Package, "_device", lambda self, index, rank=None: package._Device(
        torch.device("cuda", 0), "sm_90", 1, {}, {}))
    monkeypatch.setattr(Package, "_load", lambda self, index, bucket, tokens=None: loads.append(index) or loaded)

    monkeypatch.setattr(graphs, "allocate", lambda specs, device, batch=None: ())  # no GPU here
    monkeypatch.setattr(graphs.StreamOrder, "on", classmethod(lambda cls, device: None))
    original_capture = GraphModel.capture

    def capture(self):
        captures.append((self._model, self.copy_outputs))
        return self

    monkeypatch.setattr(GraphModel, "capture", capture)
    p = Package(tmp_path)
    lazy = p.load()
    assert isinstance(lazy, GraphModel) and captures == []  # captured at its second call
    assert lazy.copy_outputs is True and lazy.input_check is not None
    assert p.load(copy_outputs=False, check_inputs=False).input_check is None
    assert p.load(graphs=True) and len(captures) == 1  # graphs=True: captured at load
    model = p.load(graphs=False)
    assert isinstance(model, Model) and len(captures) == 1 and loads == [0]  # loaded once per device

    def failing(self):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(GraphModel, "capture", original_capture)
    monkeypatch.setattr(GraphModel, "_capture", failing)
    with pytest.raises(RuntimeError, match=r"graph failed: operation not .*; load\(..., graphs=False\) runs it"):
        p.load(graphs=True)


# --- graph mode, without a GPU: output trees, copies, stream order, a fake graph ------

def test_flatten_unflatten():
    a, b, c = torch.ones(1), torch.ones(2), torch.ones(3)
    for tree, leaves in [(a, [a]), ((a,), [a]), ((a, b), [a, b]), ([a, None, 3], [a]), (None, []),
                         ({"s": a, "t": (b, [c])}, [a, b, c]), ((), []), ((a, {"u": None, "v": b}), [a, b]),
                         (OrderedDict([("z", a), ("y", (b,))]), [a, b])]:
        got, spec = flatten(tree)
        assert all(x is y for x, y in zip(got, leaves, strict=True))
        rebuilt = unflatten(spec, got)
        assert _same_tree(rebuilt, tree) and _same_tree(unflattener(spec)(got), tree)
        copies = [x.clone() for x in got]
        assert all(x is y for x, y in zip(flatten(unflatten(spec, copies))[0], copies, strict=True))


def _same_tree(x, y):
    if isinstance(x, torch.Tensor):
        return x is y
    if isinstance(x, (tuple, list)):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same_tree, x, y))
    if isinstance(x, dict):
        return type(x) is type(y) and list(x) == list(y) and all(_same_tree(x[k], y[k]) for k in x)
    return x == y


def test_in_strides_keeps_a_planned_layout_and_copies_another():
    from aotcombo.runtime.ops import in_strides

    planned = torch.randn(2, 8, 4, 4)
    assert in_strides(planned, planned.stride()) is planned
    other = planned.to(memory_format=torch.channels_last)
    fixed = in_strides(other, planned.stride())
    assert fixed.stride() == planned.stride() and torch.equal(fixed, planned)
    assert in_strides(torch.randn(2, 1, 3)[:, :1], (3, 7, 1)).stride()[0] == 3  # size-1 dims: any stride


@pytest.mark.parametrize("n", [1, FOREACH_FROM - 1, FOREACH_FROM, 40])
def test_copies(n):
    sources = [torch.randn(3, 5 + i)[:, 1:] for i in range(n)]  # strided views among them
    targets = [torch.empty(3, 4 + i) for i in range(n)]
    copy_into(targets, sources)
    assert all(torch.equal(t, s) for t, s in zip(targets, sources))
    copies = OutputSlots(sources, keep=0)()
    assert all(torch.equal(c, s) and c.data_ptr() != s.data_ptr() for c, s in zip(copies, sources))


def test_same_tensors():
    a, b = torch.ones(1), torch.ones(1)
    assert same_tensors((a, b), (a, b)) and same_tensors((), ())
    assert not same_tensors((a,), (a, b)) and not same_tensors((a, b), (a,)) and not same_tensors((b, a), (a, b))
    assert not same_tensors((a, b.clone()), (a, b))


class _Stream:
    def __init__(self, raw, log):
        self.raw, self.log = raw, log

    def wait_event(self, event):
        self.log.append(("wait", self.raw, event.recorded_on))


class _Event:
    recorded_on = None

    def record(self, stream):
        self.recorded_on = stream.raw


def test_stream_order():
    log, current = [], [1]
    order = StreamOrder(lambda: current[0], lambda: _Stream(current[0], log), _Event())
    order.join()
    order.join()
    assert log == []  # the first stream, then the same one: nothing to wait for
    current[0] = 2
    order.join()
    assert log == [("wait", 2, 1)]  # stream 2 waits for what stream 1 had queued
    order.join()
    current[0] = 1
    order.join()
    assert log == [("wait", 2, 1), ("wait", 1, 2)]


class _FakeGraph:
    """Replays "out = 2 x + replays" into its static output, like a graph would."""

    def __init__(self, inputs):
        self.x, self.out, self.replays = inputs[0], torch.zeros(4), 0

    def replay(self):
        self.replays += 1
        time.sleep(0)  # let another thread in, as a replay on a GPU would
        self.out.copy_(self.x * 2 + self.replays)


class _NoOrder:
    def join(self):
        pass


def _graph_model(copy_outputs=True, guard=True, log=None, fail=False):
    """A GraphModel around a fake model and graph, already captured (unless ``fail``: its
    capture raises, at the second call)."""
    specs = manifests.specs({"name": "x", "shape": [4], "stride": [1], "dtype": "float32", "align": 16})
    graphs_made, runs = [], []

    def run(inputs):
        runs.append(inputs)
        return {"y": (inputs[0] * 2, None)}

    model = SimpleNamespace(name="m", variant="sm_90", device=CPU, weights=[], specs=specs, mutated=(), names=["x"],
                            batch_range=None,
                            input_check=make_input_check(specs, CPU, exact_layout=False) if guard else None,
                            kernels=[], state_buffers=None, run=run, context=1)

    def capturer(run, inputs, device, pool, state):
        if fail:
            raise RuntimeError("capture failed")
        graphs_made.append(_FakeGraph(inputs))
        return graphs_made[-1], {"y": (graphs_made[-1].out, None)}

    graph_model = GraphModel(model, copy_outputs, _NoOrder(), capturer=capturer)
    if log is not None:
        checked = graph_model.input_check

        def counting_guard(inputs):
            log.append("guard")
            return checked(inputs)

        graph_model.input_check = counting_guard
    if fail:
        return graph_model, runs
    graph_model.capture()
    return graph_model, graphs_made[0]


def test_graph_model_captures_at_the_second_call():
    model, runs = _graph_model(fail=True)
    x = torch.arange(4.0)
    assert torch.equal(model(x)["y"][0], x * 2) and len(runs) == 1  # op by op
    with pytest.warns(UserWarning, match="m: capturing the forward in a CUDA graph failed: capture failed"):
        assert torch.equal(model(x + 1)["y"][0], (x + 1) * 2)
    assert torch.equal(model(x + 2)["y"][0], (x + 2) * 2) and len(runs) == 3  # op by op from then on, no retry


def test_graph_model_first_call_builds_no_attention_plan(monkeypatch):
    """The call before the capture runs in ``ops.fresh_shapes()`` (cuDNN's attention plan is
    left to the capture); calls after a failed capture do not."""
    entered = []

    @contextlib.contextmanager
    def recording():
        entered.append(True)
        yield

    monkeypatch.setattr(graphs.ops, "fresh_shapes", recording)
    model, runs = _graph_model(fail=True)
    model(torch.arange(4.0))
    assert entered == [True]
    with pytest.warns(UserWarning, match="capture failed"):
        model(torch.arange(4.0))
    model(torch.arange(4.0))
    assert entered == [True] and len(runs) == 3


def test_graph_model_copies_any_layout():
    model, graph = _graph_model()
    x = torch.arange(8.0)[::2]  # strided: refused op by op, copied in here
    assert torch.equal(model(x)["y"][0], x * 2 + 1)
    assert torch.equal(model(x=x + 1)["y"][0], (x + 1) * 2 + 2)  # by name


def test_graph_model_keeps_outputs():
    model, graph = _graph_model()
    x = torch.arange(4.0)
    first = model(x)
    second = model(x + 1)
    assert list(first) == ["y"] and first["y"][1] is None
    assert torch.equal(first["y"][0], x * 2 + 1)  # kept: not overwritten by the next call
    assert torch.equal(second["y"][0], (x + 1) * 2 + 2)
    assert first["y"][0] is not graph.out and second["y"][0] is not graph.out


def test_graph_model_static_outputs():
    model, graph = _graph_model(copy_outputs=False)
    x = torch.arange(4.0)
    first = model(x)
    assert first["y"][0] is graph.out and torch.equal(first["y"][0], x * 2 + 1)
    model(x + 1)
    assert torch.equal(first["y"][0], (x + 1) * 2 + 2)  # valid until the next call only


def test_graph_model_static_inputs():
    log = []
    model, graph = _graph_model(log=log)
    static = model.static_inputs()
    assert static[0] is graph.x and static[0].data_ptr() % 16 == 0
    static[0].copy_(torch.arange(4.0))
    assert torch.equal(model(*static)["y"][0], torch.arange(4.0) * 2 + 1)
    assert log == []  # the static inputs themselves: no guard, no copy
    model(torch.ones(4))
    assert log == ["guard"] and torch.equal(static[0], torch.ones(4))


def test_graph_model_guards_before_copying():
    model, graph = _graph_model()
    model.static_inputs()[0].fill_(7)
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected shape \(4,\), got \(5,\)"):
        model(torch.ones(5))
    with pytest.raises(ValueError, match=r"expected 1 inputs \(x\), got 2"):
        model(torch.ones(4), torch.ones(4))
    assert graph.replays == 0 and torch.equal(model.static_inputs()[0], torch.full((4,), 7.0))


def test_graph_model_unchecked():
    model, graph = _graph_model(guard=False)
    out = model(torch.arange(4, dtype=torch.int64))  # no guard: the copy converts
    assert torch.equal(out["y"][0], torch.arange(4.0) * 2 + 1)


def test_graph_model_threads():
    model, graph = _graph_model()
    errors = []
    unflatten = model._unflatten

    def slow_unflatten(outputs):  # lets another thread in before the tree holds this call's slot
        time.sleep(0.0005)
        return unflatten(outputs)

    model._unflatten = slow_unflatten

    def worker(i):
        for j in range(100):
            x = torch.full((4,), float(1000 * i + j))
            replay = model(x)["y"][0] - 2 * x  # the replay number this call saw, unless calls mixed
            if not (1 <= replay[0] <= 200 and (replay == replay[0]).all()):
                errors.append((i, j, replay))

    run_threads(worker)
    assert not errors and graph.replays == 200


# --- imports, the driver, loading without a GPU -------------------------------------

def test_import_is_light(tmp_path):
    # as a generated package carries it: copied verbatim to <pkg>/_runtime
    shutil.copytree(RUNTIME, tmp_path / "somepkg" / "_runtime", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "somepkg" / "__init__.py").write_text("")
    code = ("import sys, time, torch; before = set(sys.modules); t = time.perf_counter(); import somepkg._runtime; "
            "print(time.perf_counter() - t); print(sorted(m for m in set(sys.modules) - before "
            "if m.split('.')[0] in ('triton', 'jinja2', 'sympy', 'numpy', 'aotcombo')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout.split("\n")
    print(f"import of the runtime after torch: {float(out[0]) * 1000:.1f} ms")
    assert out[1] == "[]"
    assert float(out[0]) < 0.5


def test_runtime_is_self_contained():
    for path in RUNTIME.glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] == ["import"] or words[:1] == ["from"] and not words[1].startswith("."):
                assert words[1].split(".")[0] in sys.stdlib_module_names | {"torch", "__future__"}, (path, line)


@pytest.mark.skipif(_has_driver(), reason="a CUDA driver is installed here")
def test_no_driver():
    for attempt in (lambda: cuda.current_context(), lambda: cuda.LoadedKernel(1, (1, 1, 1), 4, 0, ["ptr"])):
        with pytest.raises(RuntimeError, match="cannot load the CUDA driver library libcuda.so.1"):
            attempt()


def test_package_without_gpu(tmp_path):
    (tmp_path / "manifest.json").write_text(STATIC.to_json())
    package = Package(tmp_path)
    assert package._manifest is None  # read lazily
    with pytest.raises(ValueError, match="device must be 'cuda' or 'cuda:N', got 'cpu'"):
        package.load("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="torch.cuda is not available"):
            package.load()
    assert package.manifest.name == "m"
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1}))
    with pytest.raises(RuntimeError, match="manifest format 1; this runtime reads format 2"):
        Package(tmp_path).manifest


# --- the launcher and the Model, on a fake libcuda (C, compiled here) ------------------

FAKE_LIBCUDA = r"""
#include <stdint.h>
#include <string.h>
typedef struct { unsigned grid[3], block[3], shared; void *stream, *attrs; unsigned num_attrs; } Config;
uint64_t fake_launch[9], fake_params[64];  /* what the last launch received */
int fake_nparams, fake_result, fake_launches, fake_ex_launches;
void *fake_ctx;
int cuGetErrorName(int r, const char **s) { *s = r == 1 ? "CUDA_ERROR_INVALID_VALUE" : 0; return 0; }
int cuGetErrorString(int r, const char **s) { *s = "fake error"; return 0; }
int cuInit(unsigned flags) { return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)(uintptr_t)(0x1000 + d); return 0; }
int cuCtxGetCurrent(void **c) { *c = fake_ctx; return 0; }
int cuCtxSetCurrent(void *c) { fake_ctx = c; return 0; }
int cuModuleLoadData(void **m, const void *image) { *m = (void *)0x2000; return 0; }
int cuModuleGetFunction(void **f, void *m, const char *name) { *f = (void *)(0x3000 + strlen(name)); return 0; }
int cuFuncSetAttribute(void *f, int attribute, int value) { return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
  uint64_t head[9] = {(uintptr_t)f, gx, gy, gz, bx, by, bz, shared, (uintptr_t)stream};
  memcpy(fake_launch, head, sizeof head);
  for (int i = 0; i < fake_nparams; i++) fake_params[i] = *(uint64_t *)params[i];
  fake_launches++;
  return fake_result;
}
#ifndef NO_EX
int cuLaunchKernelEx(const Config *c, void *f, void **params, void **extra) {
  fake_ex_launches++;
  if (c->attrs || c->num_attrs) return 1;
  return cuLaunchKernel(f, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
                        c->shared, c->stream, params, extra);
}
#endif
"""


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory):
    """Paths of two fake libcudas: with cuLaunchKernelEx, and without (a driver older than CUDA 11.8)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the fake libcuda")
    root = tmp_path_factory.mktemp("fake_libcuda")
    (root / "fake.c").write_text(FAKE_LIBCUDA)
    paths = {"new": root / "libcuda_new.so", "old": root / "libcuda_old.so"}
    for kind, path in paths.items():
        flags = ["-DNO_EX"] if kind == "old" else []
        subprocess.run([compiler, "-shared", "-fPIC", "-O1", *flags, "-o", str(path), str(root / "fake.c")], check=True)
    return paths


@pytest.fixture
def fake(fake_libcuda, monkeypatch):
    """The runtime's driver replaced by a fake; yields a reader of what the fake saw."""
    path = str(fake_libcuda["new"])
    monkeypatch.setattr(cuda, "LIBRARY", path)
    monkeypatch.setattr(cuda, "_driver_instance", None)
    lib = ctypes.CDLL(path)
    for name in ("fake_nparams", "fake_result", "fake_launches", "fake_ex_launches"):
        ctypes.c_int.in_dll(lib, name).value = 0
    ctypes.c_void_p.in_dll(lib, "fake_ctx").value = None
    return SimpleNamespace(
        lib=lib,
        launch=lambda: list((ctypes.c_uint64 * 9).in_dll(lib, "fake_launch")),
        params=lambda n: (ctypes.c_int.in_dll(lib, "fake_nparams").__setattr__("value", n),
                          list((ctypes.c_uint64 * n).in_dll(lib, "fake_params")))[1],
        count=lambda name: ctypes.c_int.in_dll(lib, f"fake_{name}").value,
        set=lambda name, value: setattr(ctypes.c_int.in_dll(lib, f"fake_{name}"), "value", value),
    )


def test_fake_launch_pointers(fake):
    fake.params(5)
    kernel = cuda.LoadedKernel(0x3007, (5, 2, 1), 4, 100, ["ptr", "ptr", "ptr"], (16, 128), (0, 1), "cpu")
    launch = kernel.bind(0x77)
    tensors = [torch.empty(8) for _ in range(3)]
    launch(*tensors)
    assert fake.launch() == [0x3007, 5, 2, 1, 128, 1, 1, 100, 0x77]
    params = fake.params(5)
    assert params[:3] == [t.data_ptr() for t in tensors]
    assert params[3] % 128 == 0 and params[3] != 0 and params[4] == 0  # global scratch: 10 blocks x 16 bytes
    assert fake.count("ex_launches") == 1 and fake.count("launches") == 1
    tensors.reverse()
    launch(*tensors)
    assert fake.params(3) == [t.data_ptr() for t in tensors]
    with pytest.raises(TypeError, match="kernel takes 3 arguments"):
        launch(*tensors[:2])


def test_old_driver_is_a_clear_error(fake_libcuda, monkeypatch):
    monkeypatch.setattr(cuda, "LIBRARY", str(fake_libcuda["old"]))
    monkeypatch.setattr(cuda, "_driver_instance", None)
    with pytest.raises(cuda.CudaError, match="has no cuLaunchKernelEx: the NVIDIA driver is older than CUDA 11.8"):
        cuda.current_context()


def test_fake_launch_scalars(fake):
    fake.params(4)
    kernel = cuda.LoadedKernel(0x3007, (1, 1, 1), 1, 0, ["ptr", "i32", "fp32", "i64"], device="cpu")
    x = torch.empty(8)
    launch = kernel.bind(0x99)
    launch(x, -3, 1.5, -(2**40))
    assert fake.launch()[8] == 0x99
    pointer, i32, fp32, i64 = fake.params(4)
    assert pointer == x.data_ptr() and i32 & 0xFFFFFFFF == -3 & 0xFFFFFFFF and i64 == -(2**40) & (2**64 - 1)
    assert struct.unpack("<f", (fp32 & 0xFFFFFFFF).to_bytes(4, "little"))[0] == 1.5
    with pytest.raises(TypeError, match="kernel takes 4 arguments"):
        launch(x)


def test_fake_launch_error(fake):
    fake.set("result", 1)
    launch = cuda.LoadedKernel(0x3007, (1, 1, 1), 1, 0, ["ptr"], device="cpu").bind(0)
    with pytest.raises(cuda.CudaError, match="^cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE: fake error$"):
        launch(torch.empty(1))
    with pytest.raises(ValueError, match="unknown kernel parameter kind 'bf16'"):
        cuda.LoadedKernel(0x3007, (1, 1, 1), 1, 0, ["ptr", "bf16"], device="cpu")


def test_launcher_is_pluggable(fake, monkeypatch):
    seen = []
    monkeypatch.setattr(cuda, "launcher", lambda kernel, stream, scratch, keep: seen.append((stream, scratch)) or len)
    assert cuda.LoadedKernel(0x3007, (2, 1, 1), 1, 0, ["ptr"], (0, 1), (4, 64), "cpu").bind(5) is len
    assert seen[0][0] == 5 and seen[0][1][0] == 0 and seen[0][1][1] % 64 == 0


def test_fake_contexts(fake):
    assert cuda.current_context() == 0
    ctx = cuda.primary_context(1)
    assert ctx == 0x1001
    cuda.set_current_context(ctx)
    assert cuda.current_context() == ctx
    assert cuda.get_function(cuda.load_module(b"// ptx"), "add") == 0x3003


def _fake_model(check=False):
    def forward(kernels, weights, device, x):
        kernels[0](x, weights[0])
        return cuda.current_context(), device

    kernel = cuda.LoadedKernel(0x3007, (1, 1, 1), 1, 0, ["ptr", "ptr"], device="cpu")
    specs = manifests.specs({"name": "x", "shape": [2], "stride": [1], "dtype": "float32", "align": 16})
    loaded = Loaded("m", "sm_90", torch.device("cuda", 1), 0x1001, forward, [kernel], specs)
    return Model(loaded, [torch.ones(2)], State({}, {}), check)


def test_fake_model_run(fake, monkeypatch):
    fake.params(2)
    streams = iter([0x10, 0x10, 0x20])
    monkeypatch.setattr(cuda, "current_stream", lambda index: next(streams))
    model = _fake_model()
    x = torch.ones(2)
    for stream in (0x10, 0x10, 0x20):
        context, device = model(x)
        assert context == 0x1001 and device == torch.device("cuda", 1)  # the model's context, during the call
        assert cuda.current_context() == 0  # and the thread's own after it
        assert fake.launch()[8] == stream and fake.params(2) == [x.data_ptr(), model.weights[0].data_ptr()]
    assert list(model._bound) == [0x10, 0x20]
    cuda.set_current_context(0x1001)
    monkeypatch.setattr(cuda, "current_stream", lambda index: 0x20)
    assert model(x)[0] == 0x1001 and cuda.current_context() == 0x1001


def test_prepare_runs_once_at_load_and_forward_reads_its_results(fake, monkeypatch):
    """A program with work on the weights alone: ``prepare`` runs once, when the model is made,
    in the model's context; every call's forward gets what it returned."""
    monkeypatch.setattr(cuda, "current_stream", lambda index: 0x10)
    seen = []

    def prepare(kernels, weights, device):
        seen.append(cuda.current_context())
        kernels[0](weights[0], weights[0])
        return [weights[0] * 2]

    def forward(kernels, weights, device, x):
        kernels[0](x, weights[0])
        return weights[0]

    kernel = cuda.LoadedKernel(0x3007, (1, 1, 1), 1, 0, ["ptr", "ptr"], device="cpu")
    specs = manifests.specs({"name": "x", "shape": [2], "stride": [1], "dtype": "float32", "align": 16})
    loaded = Loaded("m", "sm_90", torch.device("cuda", 1), 0x1001, forward, [kernel], specs, prepare=prepare)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(synchronize=lambda: None))
    model = Model(loaded, [torch.ones(2)], State({}, {}), False)
    assert seen == [0x1001] and fake.count("launches") == 1 and cuda.current_context() == 0
    for _ in range(3):
        assert torch.equal(model(torch.ones(2)), torch.full((2,), 2.0))
    assert seen == [0x1001] and fake.count("launches") == 4
    # the buckets of one load share a prepare that is the same (its key), and only then
    shared = {}
    first = Model(loaded._replace(prepare_key="k1"), [torch.ones(2)], State({}, {}), False, shared)
    second = Model(loaded._replace(prepare_key="k1"), [torch.ones(2)], State({}, {}), False, shared)
    other = Model(loaded._replace(prepare_key="k2"), [torch.ones(2)], State({}, {}), False, shared)
    assert first.weights is second.weights and other.weights is not first.weights and len(seen) == 3


def test_fake_model_guards(fake, monkeypatch):
    monkeypatch.setattr(cuda, "current_stream", lambda index: 0x10)
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected device cuda:1, got cpu"):
        _fake_model(check=True)(torch.ones(2))
    assert fake.count("launches") == 0
    assert repr(_fake_model()) == "<Model m sm_90 on cuda:1>"


# --- the torch a package runs on ---------------------------------------------------------------

@pytest.mark.parametrize("version, ok", [("2.11.0", True), ("2.14.1+cu130", True), ("2.12.0a0+git1234", True),
                                         ("2.10.2", False), ("2.15.0", False), ("2.15.0a0+gitabc", False),
                                         ("3.0.0", False), ("1.13.1", False)])
def test_check_torch_range(version, ok):
    m = manifests.manifest()
    if ok:
        package.check_torch(m, version)
    else:
        with pytest.raises(RuntimeError,
                           match=rf"runs on torch 2\.11 to 2\.14, and this is torch {re.escape(version)}"):
            package.check_torch(m, version)


def test_load_under_an_unsupported_torch_names_the_private_ops_and_the_range(tmp_path, monkeypatch):
    m = dataclasses.replace(manifests.manifest(), extern_ops=("aten::_embedding_bag_forward_only.default",
                                                             "aten::mm.out", "aten::scaled_dot_product_attention"))
    assert m.private_ops == ("aten::_embedding_bag_forward_only.default",)
    (tmp_path / "manifest.json").write_text(m.to_json())
    monkeypatch.setattr(torch, "__version__", "2.10.0")
    with pytest.raises(RuntimeError) as e:
        Package(tmp_path).load("cuda")  # before any device is looked at: no GPU needed
    message = str(e.value)
    assert "private aten::_embedding_bag_forward_only.default" in message and "aten::mm" not in message
    assert "install torch>=2.11,<2.15" in message
    monkeypatch.setenv("AOTCOMBO_ANY_TORCH", "1")
    package.check_torch(m, "2.10.0")


def test_output_slots_carve_one_allocation_per_dtype():
    sources = [torch.randn(3, 5), torch.randn(4, 6)[:, 1:], torch.randn(2).expand(3, 2), torch.randn(0, 3),
               torch.arange(7), torch.randn(1, 3)]
    sets = OutputSlots(sources, keep=0)
    first, second = sets(), sets()
    for a, b, s, (head, _) in zip(first, second, sources, sets.rooms):
        assert torch.equal(a, s) and torch.equal(b, s) and a.shape == s.shape and a.dtype == s.dtype
        assert a.numel() == 0 or a.data_ptr() != b.data_ptr() != s.data_ptr()
        start = a.data_ptr() - head * a.element_size()  # the buffer it is a view of, held around it
        assert a.numel() == 0 or (start - a.untyped_storage().data_ptr()) % 512 == 0  # as torch aligns
    assert sets.rooms[1] == (1, 24)  # [:, 1:] of 4 x 6: its whole buffer, one element before it
    assert first[1].stride() == (6, 1) and first[0].stride() == (5, 1)  # the source's strides (a program writes there)
    assert first[2].stride() == (2, 1)  # an expand's: dense
    floats = {t.untyped_storage().data_ptr() for t in first if t.dtype == torch.float32}
    assert len(floats) == 1  # one allocation for the float outputs of a call


def test_output_slots_are_reused_only_when_the_caller_let_go():
    source = [torch.zeros(4), torch.zeros(2, dtype=torch.int64)]
    sets = OutputSlots(source)

    def call(value):
        source[0].fill_(value)
        source[1].fill_(value)
        return tuple(sets())

    y = call(1)
    first = [t.data_ptr() for t in y]
    y = call(2)  # the first set is still held while this call runs: a second set
    assert [t.data_ptr() for t in y] != first
    y = call(3)  # the first set is free again: reused, no allocation
    assert [t.data_ptr() for t in y] == first and float(y[0][0]) == 3
    kept = y[0]  # the caller keeps one tensor of it ...
    view = call(4)[1][:1]  # ... and a view of the next one
    y = call(5)
    assert y[0].data_ptr() not in {kept.data_ptr(), first[0]} and float(kept[0]) == 3  # never overwritten
    assert int(view[0]) == 4 and float(y[0][0]) == 5
    held = [call(v) for v in range(6, 12)]  # the caller keeps every output: each call a new set
    assert [float(h[0][0]) for h in held] == list(range(6, 12)) and len(sets.slots) <= 2


@pytest.mark.parametrize("counts", ["C", "Python"])
def test_a_slot_the_caller_holds_any_tensor_of_is_never_reused(monkeypatch, counts):
    """Reference counts read in C (runtime/_guard.c) or in Python (the pure wheel): in ``y = m(x)``
    the two slots alternate; a slot of which the caller keeps only its last tensor is not reused."""
    import sys

    from aotcombo.runtime import outputs

    if counts == "C":
        from aotcombo.testing.native import compiled

        guard = compiled("_guard")
        monkeypatch.setattr(outputs, "refcounts", guard.refcounts)
        monkeypatch.setattr(outputs, "same_refcounts", guard.same_refcounts)
    else:
        monkeypatch.setattr(outputs, "refcounts", lambda tensors: tuple(map(sys.getrefcount, tensors)))
        monkeypatch.setattr(outputs, "same_refcounts", lambda tensors, c: outputs.refcounts(tensors) == c)
    sets = OutputSlots([torch.zeros(4), torch.zeros(3), torch.zeros(2)])
    y = tuple(sets())
    pointers = {y[0].data_ptr()}
    for _ in range(4):
        y = tuple(sets())
        pointers.add(y[0].data_ptr())
    assert len(pointers) == 2 and len(sets.slots) == 2  # two slots, alternating
    last = y[2]
    del y
    z = tuple(sets())
    assert z[2].data_ptr() != last.data_ptr()  # the slot holding ``last`` is not reused
    w = tuple(sets())
    assert w[2].data_ptr() != last.data_ptr() and w[2].data_ptr() != z[2].data_ptr()  # every slot held: a new set

