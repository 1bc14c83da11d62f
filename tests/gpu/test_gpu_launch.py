"""The runtime's driver calls on a GPU, without a built package: Triton kernels compiled here
launched through ``runtime/cuda.py`` (cubin and PTX, global scratch), and a hand-written package
(a manifest, a program, one kernel, weights) loaded and run op by op and in graph mode, from
threads and streams and from a thread with no current context. The CPU half, with a stand-in
driver, is tests/unit/test_runtime_driver.py."""

import hashlib
import threading

import pytest
import torch

from aotcombo.runtime import cuda
from aotcombo.runtime.graphs import GraphModel
from aotcombo.runtime.loader import Package
from aotcombo.runtime.manifest import Weight
from aotcombo.testing import manifests
from aotcombo.testing.gpu import run_threads

pytestmark = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _compile(kind, arch):
    triton = pytest.importorskip("triton")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # device-side TMA descriptors: global scratch
        x = tl.make_tensor_descriptor(x_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
        out = tl.make_tensor_descriptor(out_ptr, shape=[n], strides=[1], block_shape=[BLOCK])
        out.store([tl.program_id(0) * BLOCK], x.load([tl.program_id(0) * BLOCK]) * 2)

    fn, sig = {"add": (add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}),
               "double": (double, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"})}[kind]
    src = ASTSource(fn=fn, signature={**sig, "BLOCK": "constexpr"}, constexprs={"BLOCK": 256})
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": 4})


def _arch():
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def _kernel(ck, image, grid, params):
    md = ck.metadata
    function = cuda.get_function(cuda.load_module(image), md.name)
    return cuda.LoadedKernel(function, grid, md.num_warps, md.shared, params,
                       (md.global_scratch_size, md.global_scratch_align),
                       (md.profile_scratch_size, md.profile_scratch_align), "cuda")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("form", ["cubin", "ptx"])
def test_kernel_launch(form):
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # torch makes the primary context current on this thread
    ck = _compile("add", _arch())
    image = ck.asm["cubin"] if form == "cubin" else ck.asm["ptx"].encode()
    kernel = _kernel(ck, image, (64, 1, 1), ["ptr", "ptr", "ptr", "i32"])
    x, y = torch.randn(2, 64 * 256 - 3, device="cuda")
    out = torch.empty_like(x)
    launch = kernel.bind(torch.cuda.current_stream().cuda_stream)
    launch(x, y, out, x.numel())
    torch.testing.assert_close(out, x + y)
    with pytest.raises(TypeError, match="kernel takes 4 arguments, got 3"):
        launch(x, y, out)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9, reason="needs sm_90+")
def test_kernel_global_scratch():
    torch.zeros(1, device="cuda")
    ck = _compile("double", _arch())
    assert ck.metadata.global_scratch_size > 0
    kernel = _kernel(ck, ck.asm["cubin"], (8, 1, 1), ["ptr", "ptr", "i32"])
    x = torch.randn(8 * 256, device="cuda")
    out = torch.empty_like(x)
    kernel.bind(torch.cuda.current_stream().cuda_stream)(x, out, x.numel())
    torch.testing.assert_close(out, x * 2)


def _write_package(root, name, variant):
    arch = _arch()
    ck = _compile("add", arch)
    pkg = root / name
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "program.py").write_text(
        "import torch\n\n"
        "def forward(kernels, weights, device, x, aotcombo_out=None):\n"
        "    out = torch.empty_like(x)  # no output placed: the manifest names none\n"
        "    kernels[0](x, weights[0], out, x.numel())\n"
        "    return out\n")
    image = ck.asm["ptx"].encode() if variant == "ptx" else ck.asm["cubin"]
    (pkg / "kernels" / f"add.{'ptx' if variant == 'ptx' else 'cubin'}").write_bytes(image)
    w = torch.randn(64, 256)
    torch.save([w], pkg / "weights.pt")
    md = ck.metadata
    kernel = manifests.kernel("add", f"kernels/add.{'ptx' if variant == 'ptx' else 'cubin'}", md.name, (64, 1, 1),
                              md.num_warps, md.shared, ("ptr", "ptr", "ptr", "i32"),
                              (md.global_scratch_size, md.global_scratch_align),
                              (md.profile_scratch_size, md.profile_scratch_align), hashlib.sha256(image).hexdigest())
    key = "ptx" if variant == "ptx" else f"sm_{arch}"
    m = manifests.manifest(name, archs=() if variant == "ptx" else (arch,), ptx_arch=arch,
                           ins=manifests.inputs({"name": "x", "shape": [64, 256], "stride": [256, 1],
                                                 "dtype": "float32"}),
                           variants={key: manifests.variant("program", [kernel])},
                           tensors=[Weight("w", "float32", (64, 256))],
                           weights_bytes=(pkg / "weights.pt").stat().st_size)
    (pkg / "manifest.json").write_text(m.to_json())
    return pkg, w


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("graphs", [False, True], ids=["op_by_op", "graph"])
@pytest.mark.parametrize("variant", ["cubin", "ptx"])
def test_package_runs(tmp_path, monkeypatch, variant, graphs):
    name = f"aotcombo_rt_test_{variant}_{graphs}"
    pkg, w = _write_package(tmp_path, name, variant)
    monkeypatch.syspath_prepend(str(tmp_path))
    package = Package(pkg, name)
    model = package.load("cuda:0", graphs=graphs)
    assert isinstance(model, GraphModel) is graphs
    assert model.variant == ("ptx" if variant == "ptx" else f"sm_{_arch()}")
    again = package.load("cuda", graphs=False).weights
    assert all(a is b for a, b in zip(again, model.weights, strict=True))  # loaded once per device
    x = torch.randn(64, 256, device="cuda")
    torch.testing.assert_close(model(x), x + w.cuda())
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected shape"):
        model(x[:, :255])

    results = {}

    def worker(i):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            xs = [torch.full((64, 256), float(i * 100 + j), device="cuda") for j in range(50)]
            outs = [model(xi) for xi in xs]
        stream.synchronize()
        results[i] = all(torch.equal(o, xi + w.cuda()) for o, xi in zip(outs, xs))

    run_threads(worker)
    assert results == {0: True, 1: True}
    if not graphs:
        assert len(model._bound) >= 2  # one bound list per stream


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("graphs", [False, True], ids=["op_by_op", "graph"])
def test_package_on_a_thread_without_context(tmp_path, monkeypatch, graphs):
    name = f"aotcombo_rt_test_noctx_{graphs}"
    pkg, w = _write_package(tmp_path, name, "cubin")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = Package(pkg, name).load("cuda:0", graphs=graphs)
    x = torch.randn(64, 256, device="cuda")
    torch.cuda.synchronize()
    seen = []

    def worker():
        cuda.set_current_context(0)
        out = model(x)
        seen.append(cuda.current_context())
        cuda.set_current_context(cuda.primary_context(0))
        torch.cuda.synchronize()
        seen.append(out)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    if not graphs:
        assert seen[0] == 0  # the model put back what it found (torch's ops may not)
    torch.testing.assert_close(seen[1], x + w.cuda())
