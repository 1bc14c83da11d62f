"""The runtime shipped in every generated package (aotcombo/runtime), on the CPU: which variant
loads, the per-call input guards and their messages, and the load options."""

import pytest
import torch

from aotcombo.runtime import graphs, loader as package
from aotcombo.runtime.graphs import GraphModel
from aotcombo.runtime.inputs import bind, check_inputs, make_input_check
from aotcombo.runtime.loader import Loaded, Model, Package, check_options, choose_variant
from aotcombo.runtime.manifest import Dynamic

from aotcombo.testing import manifests


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


