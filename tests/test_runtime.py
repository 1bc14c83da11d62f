"""The runtime shipped in every generated package (aotcombo/runtime): CPU tests, and GPU tests marked gpu."""

import ctypes
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from aotcombo.runtime import Package, check_inputs, choose_variant, cuda, input_specs

RUNTIME = Path(__file__).parents[1] / "aotcombo" / "runtime"
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


# --- choose_variant ---------------------------------------------------------------

def _manifest(archs, ptx_arch):
    variants = {f"sm_{a}": {} for a in archs}
    if ptx_arch is not None:
        variants["ptx"] = {}
    return {"name": "mymodel", "archs": archs, "ptx_arch": ptx_arch, "variants": variants}


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


# --- input guards -----------------------------------------------------------------

SPECS = input_specs([
    {"name": "x", "shape": [64, 256], "stride": [256, 1], "dtype": "bfloat16", "align": 16},
    {"name": "n", "shape": [4], "stride": [1], "dtype": "int64", "align": 16},
])


def _good():
    return torch.zeros(64, 256, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.int64)


def test_guards_pass():
    check_inputs(SPECS, _good())
    check_inputs(SPECS, _good(), torch.device("cpu"))


@pytest.mark.parametrize("make, error, message", [
    (lambda x, n: (x,), ValueError, r"expected 2 inputs \(x, n\), got 1"),
    (lambda x, n: (x, n, n), ValueError, r"expected 2 inputs \(x, n\), got 3"),
    (lambda x, n: (x.tolist(), n), TypeError, r"input 0 \('x'\): expected a torch.Tensor, got list"),
    (lambda x, n: (x.float(), n), TypeError, r"input 0 \('x'\): expected dtype torch.bfloat16, got torch.float32"),
    (lambda x, n: (x[:, :255], n), ValueError, r"input 0 \('x'\): expected shape \(64, 256\), got \(64, 255\)"),
    (lambda x, n: (x.t().contiguous().t(), n), ValueError,
     r"input 0 \('x'\): expected stride \(256, 1\), got \(1, 64\)"),
    (lambda x, n: (x, torch.zeros(5, dtype=torch.int64)[1:]), ValueError,
     r"input 1 \('n'\): expected data_ptr aligned to 16 bytes, got one 8 bytes past \(storage offset 1\)"),
    (lambda x, n: (torch.zeros(64 * 256 + 1, dtype=torch.bfloat16)[1:].view(64, 256), n), ValueError,
     r"input 0 \('x'\): expected data_ptr aligned to 16 bytes, got one 2 bytes past \(storage offset 1\)"),
])
def test_guards_fail(make, error, message):
    with pytest.raises(error, match=message):
        check_inputs(SPECS, make(*_good()))


def test_guard_device():
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected device cuda:0, got cpu"):
        check_inputs(SPECS, _good(), torch.device("cuda", 0))


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
    for attempt in (lambda: cuda.current_context(), lambda: cuda.Kernel(1, (1, 1, 1), 4, 0, ["ptr"])):
        with pytest.raises(RuntimeError, match="cannot load the CUDA driver library libcuda.so.1"):
            attempt()


def test_package_without_gpu(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 1, "name": "m"}))
    package = Package(tmp_path)
    assert package._manifest is None  # read lazily
    with pytest.raises(ValueError, match="device must be 'cuda' or 'cuda:N', got 'cpu'"):
        package.load("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="torch.cuda is not available"):
            package.load()
    assert package.manifest["name"] == "m"
    (tmp_path / "manifest.json").write_text(json.dumps({"format": 2}))
    with pytest.raises(RuntimeError, match="manifest format 2 is not 1"):
        Package(tmp_path).manifest


# --- on a GPU ---------------------------------------------------------------------

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
    return cuda.Kernel(function, grid, md.num_warps, md.shared, params,
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
    kernel(torch.cuda.current_stream().cuda_stream, x, y, out, x.numel())
    torch.testing.assert_close(out, x + y)
    with pytest.raises(TypeError, match="kernel takes 4 arguments, got 3"):
        kernel(0, x, y, out)


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
    kernel(torch.cuda.current_stream().cuda_stream, x, out, x.numel())
    torch.testing.assert_close(out, x * 2)


def _write_package(root, name, variant):
    arch = _arch()
    ck = _compile("add", arch)
    pkg = root / name
    (pkg / "kernels").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "program.py").write_text(
        "import torch\n\n"
        "def forward(kernels, weights, device, x):\n"
        "    out = torch.empty_like(x)\n"
        "    kernels[0](x, weights[0], out, x.numel())\n"
        "    return out\n")
    if variant == "ptx":
        (pkg / "kernels" / "add.ptx").write_text(ck.asm["ptx"])
    else:
        (pkg / "kernels" / "add.cubin").write_bytes(ck.asm["cubin"])
    w = torch.randn(64, 256)
    torch.save([w], pkg / "weights.pt")
    md = ck.metadata
    kernel = {"name": "add", "image": f"kernels/add.{'ptx' if variant == 'ptx' else 'cubin'}", "function": md.name,
              "grid": [64, 1, 1], "num_warps": md.num_warps, "shared": md.shared, "params": ["ptr", "ptr", "ptr", "i32"],
              "global_scratch": [md.global_scratch_size, md.global_scratch_align],
              "profile_scratch": [md.profile_scratch_size, md.profile_scratch_align]}
    (pkg / "manifest.json").write_text(json.dumps({
        "format": 1, "name": name, "versions": {}, "archs": [] if variant == "ptx" else [arch],
        "ptx_arch": arch if variant == "ptx" else None,
        "inputs": [{"name": "x", "shape": [64, 256], "stride": [256, 1], "dtype": "float32", "align": 16}],
        "weights": "weights.pt", "out_spec": "",
        "variants": {"ptx" if variant == "ptx" else f"sm_{arch}": {"program": "program", "kernels": [kernel]}}}))
    return pkg, w


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("variant", ["cubin", "ptx"])
def test_package_runs(tmp_path, monkeypatch, variant):
    name = f"aotcombo_rt_test_{variant}"
    pkg, w = _write_package(tmp_path, name, variant)
    monkeypatch.syspath_prepend(str(tmp_path))
    package = Package(pkg, name)
    model = package.load("cuda:0")
    assert model.variant == ("ptx" if variant == "ptx" else f"sm_{_arch()}")
    assert package.load("cuda").weights is model.weights  # loaded once per device
    x = torch.randn(64, 256, device="cuda")
    torch.testing.assert_close(model(x), x + w.cuda())
    with pytest.raises(ValueError, match=r"input 0 \('x'\): expected shape"):
        model(x[:, :255])

    results, errors = {}, []

    def worker(i):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                xs = [torch.full((64, 256), float(i * 100 + j), device="cuda") for j in range(50)]
                outs = [model(xi) for xi in xs]
            stream.synchronize()
            results[i] = all(torch.equal(o, xi + w.cuda()) for o, xi in zip(outs, xs))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {0: True, 1: True}
    assert len(model._bound) >= 2  # one bound list per stream


@pytest.mark.gpu
@needs_gpu
def test_package_on_a_thread_without_context(tmp_path, monkeypatch):
    name = "aotcombo_rt_test_noctx"
    pkg, w = _write_package(tmp_path, name, "cubin")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = Package(pkg, name).load("cuda:0")
    x = torch.randn(64, 256, device="cuda")
    seen = []

    def worker():
        cuda.set_current_context(0)
        out = model(x)
        seen.append(cuda.current_context())  # the model put back what it found
        cuda.set_current_context(model._context)
        torch.cuda.synchronize()
        seen.append(out)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen[0] == 0
    torch.testing.assert_close(seen[1], x + w.cuda())
