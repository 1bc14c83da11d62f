"""The runtime shipped in every generated package, on the CPU: its imports, loading without a GPU,
the launcher and the Model on a fake libcuda (C, compiled here), the torch a package runs on and its
output slots; its driver calls on a GPU are tests/gpu/test_gpu_launch.py."""

import ctypes
import dataclasses
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from aotcombo.runtime import cuda, loader as package
from aotcombo.runtime.outputs import OutputSlots
from aotcombo.runtime.loader import Loaded, Model, Package
from aotcombo.runtime.state import State

from aotcombo.testing import manifests

RUNTIME = Path(__file__).parents[2] / "aotcombo" / "runtime"


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False



STATIC = manifests.manifest()


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

