"""The C launcher (aotcombo/runtime/_launch.c) without a GPU: it compiles reproducibly, imports,
and calls a stand-in "driver function" (a ctypes callback recording what it is given) exactly
as the ctypes launcher does, with the same errors. The GPU side is in test_gpu_runtime.py."""

from __future__ import annotations

import ctypes
import importlib.util
import tempfile
from ctypes import POINTER, c_int, c_uint, c_uint64, c_void_p

import pytest
import torch

from aotcombo import native
from aotcombo.runtime import cuda

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

LAUNCH = ctypes.CFUNCTYPE(c_int, c_void_p, *[c_uint] * 7, c_void_p, POINTER(c_void_p), c_void_p)
LAUNCH_EX = ctypes.CFUNCTYPE(c_int, POINTER(cuda.LaunchConfig), c_void_p, POINTER(c_void_p), c_void_p)


@pytest.fixture(scope="module")
def ext(tmp_path_factory):
    path = native.compile_to(tmp_path_factory.mktemp("native"))
    spec = importlib.util.spec_from_file_location("_launch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeDriver:
    """cuLaunchKernel and cuLaunchKernelEx stand-ins that record each call and return ``result``;
    ``launch``/``launch_ex`` are untyped ctypes function pointers, as cuda._Driver's are."""

    def __init__(self, count: int, result: int = 0, ex: bool = True):
        self.calls, self.result, self.count = [], result, count
        self._callbacks = (LAUNCH(self._launch), LAUNCH_EX(self._launch_ex))
        self.launch, self.launch_ex = (self._untyped(cb, name) for cb, name in
                                       zip(self._callbacks, ("cuLaunchKernel", "cuLaunchKernelEx")))
        if not ex:
            self.launch_ex = None

    @staticmethod
    def _untyped(callback, name):
        fn = ctypes.PYFUNCTYPE(c_int)(ctypes.cast(callback, c_void_p).value)
        fn.argtypes, fn.__name__ = None, name
        return fn

    def address(self, ex: bool) -> int:
        return ctypes.cast(self.launch_ex if ex else self.launch, c_void_p).value

    def _record(self, kind, function, grid, block, shared, stream, params, extra):
        values = [ctypes.cast(params[i], POINTER(c_uint64))[0] for i in range(self.count)]
        self.calls.append((kind, function, tuple(grid), tuple(block), shared, stream or 0, values, extra))
        return self.result

    def _launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return self._record("plain", function, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra)

    def _launch_ex(self, config, function, params, extra):
        c = config.contents
        assert c.attrs is None and c.num_attrs == 0
        return self._record("ex", function, c.grid, c.block, c.shared, c.stream, params, extra)

    def check(self, call: str, result: int) -> None:  # cuda._Driver.check's contract
        if result:
            raise cuda.CudaError(f"{call} failed: CUDA_ERROR_{result}: stand-in")


def _kernel(driver, n=3, params=None):
    kernel = object.__new__(cuda.Kernel)  # no GPU: the fields bind() and the launchers read
    kernel.driver, kernel.function, kernel.grid, kernel.block, kernel.shared = driver, 0xF00D, (7, 2, 1), 128, 4096
    kernel.params = params or ["ptr"] * n
    return kernel


# --- the build ---------------------------------------------------------------------------


def test_compiles_reproducibly_with_no_paths_inside(tmp_path):
    first, problem = native._compile.__wrapped__()
    second, _ = native._compile.__wrapped__()
    assert problem is None and first == second and first.startswith(b"\x7fELF")
    for banned in (tempfile.gettempdir().encode() + b"/", str(native.SOURCE.parent).encode(), b"aotcombo-native"):
        assert banned not in first
    assert native.compile_to(tmp_path).read_bytes() == first


def test_compiles_without_warnings_against_the_limited_api(ext, tmp_path):
    """The source defines Py_LIMITED_API (3.10): a call outside the stable ABI would be undeclared,
    which FLAGS make an error; here any warning at all fails."""
    import subprocess
    import sysconfig

    assert b"#define Py_LIMITED_API 0x030A0000" in native.SOURCE.read_bytes()
    assert "-Werror=implicit-function-declaration" in native.FLAGS
    run = subprocess.run([*native.compiler(), *native.FLAGS, "-Wextra", "-Werror", "-I" + sysconfig.get_paths()["include"],
                          str(native.SOURCE), "-o", str(tmp_path / native.FILENAME)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert ext.__name__ == "_launch" and callable(ext.launcher)


def test_no_compiler_is_one_warning_and_no_file(monkeypatch, capsys):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    native._compile.cache_clear()
    try:
        assert native.extension() is None and native.extension() is None
    finally:
        native._compile.cache_clear()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("aotcombo: warning: no C compiler (/nonexistent/cc)"), err
    assert "ctypes" in err[0]


def test_native_off_by_environment_is_silent(monkeypatch, capsys):
    monkeypatch.setenv("AOTCOMBO_NATIVE", "0")
    assert native.extension() is None
    assert capsys.readouterr().err == ""


# --- the extension on its own --------------------------------------------------------------


@pytest.mark.parametrize("ex", [True, False])
def test_driver_gets_grid_block_stream_and_pointers(ext, ex):
    driver = FakeDriver(count=5)
    launch = ext.launcher(driver.address(ex), ex, 0xBEEF, (4, 5, 6), (64, 1, 1), 1024, 0xABC, 3, (111, 222),
                          int, driver.check, None)
    assert launch(10, 20, 2**64 - 1) is None
    kind = "ex" if ex else "plain"
    assert driver.calls == [(kind, 0xBEEF, (4, 5, 6), (64, 1, 1), 1024, 0xABC, [10, 20, 2**64 - 1, 111, 222], None)]


def test_tensors_data_pointers(ext):
    driver = FakeDriver(count=2)
    tensors = [torch.ones(4), torch.arange(10.0)[3:]]
    launch = ext.launcher(driver.address(True), True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 2, (), torch.Tensor.data_ptr,
                          driver.check, None)
    launch(*tensors)
    assert driver.calls[0][6] == [t.data_ptr() for t in tensors]


def test_pointer_by_method_name(ext):
    class Fake:
        def __init__(self, value):
            self.value = value

        def data_ptr(self):
            return self.value

    driver = FakeDriver(count=2)
    launch = ext.launcher(driver.address(True), True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 2, (), "data_ptr",
                          driver.check, None)
    launch(Fake(5), torch.ones(3))
    assert driver.calls[0][6][0] == 5 and driver.calls[0][6][1] != 0
    with pytest.raises(AttributeError):
        launch(Fake(1), object())


def test_argument_count_and_type_errors(ext):
    driver = FakeDriver(count=2)
    launch = ext.launcher(driver.address(True), True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 2, (), torch.Tensor.data_ptr,
                          driver.check, None)
    with pytest.raises(TypeError, match=r"^kernel takes 2 arguments, got 3$"):
        launch(torch.ones(1), torch.ones(1), torch.ones(1))
    with pytest.raises(TypeError, match=r"^kernel takes 2 arguments, got 0$"):
        launch()
    with pytest.raises(TypeError):
        launch(torch.ones(1), 5)  # not a tensor: data_ptr refuses it
    with pytest.raises(TypeError):
        launch(x=1)  # no keywords
    assert driver.calls == []
    with pytest.raises(TypeError):
        ext.launcher(driver.address(True), True, 1, (1, 1), (32, 1, 1), 0, 0, 2, (), int, driver.check, None)
    with pytest.raises(ValueError):
        ext.launcher(0, True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 2, (), int, driver.check, None)


def test_pointer_of_errors_and_overflow_propagate(ext):
    driver = FakeDriver(count=1)

    def broken(_):
        raise KeyError("boom")

    for pointer_of, error in ((broken, KeyError), (lambda _: -1, OverflowError), (lambda _: "0", TypeError)):
        launch = ext.launcher(driver.address(True), True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 1, (), pointer_of,
                              driver.check, None)
        with pytest.raises(error):
            launch(object())
    assert driver.calls == []


def test_failed_launch_raises_the_drivers_error(ext):
    driver = FakeDriver(count=1, result=700)
    launch = ext.launcher(driver.address(False), False, 1, (1, 1, 1), (32, 1, 1), 0, 0, 1, (), int,
                          lambda code: driver.check("cuLaunchKernel", code), None)
    with pytest.raises(cuda.CudaError, match=r"^cuLaunchKernel failed: CUDA_ERROR_700: stand-in$"):
        launch(1)
    silent = ext.launcher(driver.address(False), False, 1, (1, 1, 1), (32, 1, 1), 0, 0, 1, (), int,
                          lambda code: None, None)
    with pytest.raises(RuntimeError, match=r"^cuLaunchKernel failed: CUresult 700$"):
        silent(1)


def test_keeps_what_it_is_given_alive(ext):
    import gc
    import weakref

    class Buffer:
        pass

    driver, buffer = FakeDriver(count=0), Buffer()
    ref = weakref.ref(buffer)
    launch = ext.launcher(driver.address(True), True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 0, (), int, driver.check,
                          buffer)
    del buffer
    gc.collect()
    assert ref() is not None
    launch()
    del launch
    gc.collect()
    assert ref() is None and len(driver.calls) == 1


# --- through the runtime: the same calls and errors as the ctypes launcher -------------------------


@pytest.mark.parametrize("ex", [True, False])
def test_runtime_launchers_agree(ext, monkeypatch, ex):
    monkeypatch.setattr(cuda, "_launch", ext)
    driver = FakeDriver(count=5, ex=ex)
    tensors = [torch.randn(8) for _ in range(3)]
    launches = {name: make(_kernel(driver), 0x5EED, [0, 4096], None)
                for name, make in (("c", cuda._native_launcher), ("ctypes", cuda._ctypes_launcher))}
    assert type(launches["c"]).__name__ == "builtin_function_or_method"
    assert type(launches["ctypes"]).__name__ == "function"
    for name in ("c", "ctypes"):
        launches[name](*tensors)
    c_call, ctypes_call = driver.calls
    assert c_call == ctypes_call
    assert c_call[:6] == ("ex" if ex else "plain", 0xF00D, (7, 2, 1), (128, 1, 1), 4096, 0x5EED)
    assert c_call[6] == [t.data_ptr() for t in tensors] + [0, 4096]
    driver.result = 719
    errors = {}
    for name, launch in launches.items():
        with pytest.raises(cuda.CudaError) as info:
            launch(*tensors)
        errors[name] = str(info.value)
        with pytest.raises(TypeError) as info:
            launch(*tensors[:2])
        errors[name + " count"] = str(info.value)
    assert errors["c"] == errors["ctypes"] == f"cuLaunchKernel{'Ex' if ex else ''} failed: CUDA_ERROR_719: stand-in"
    assert errors["c count"] == errors["ctypes count"] == "kernel takes 3 arguments, got 2"


def test_integer_parameters_launch_through_c_as_ctypes_does(ext, monkeypatch):
    monkeypatch.setattr(cuda, "_launch", ext)
    driver = FakeDriver(count=5)
    kernel = _kernel(driver, params=["ptr", "i32", "i64"])
    launches = [cuda._native_launcher(kernel, 0, [0, 0], None), cuda._ctypes_launcher(kernel, 0, [0, 0], None)]
    assert [type(launch).__name__ for launch in launches] == ["builtin_function_or_method", "function"]
    x = torch.ones(2)
    for launch in launches:
        launch(x, 7, -3)
    c_call, ctypes_call = driver.calls
    assert c_call[6][0] == ctypes_call[6][0] == x.data_ptr()
    for got in (c_call[6], ctypes_call[6]):  # the driver reads each parameter's own width
        assert got[1] & 0xFFFFFFFF == 7 and got[2] == 2**64 - 3
    with pytest.raises(TypeError):
        launches[0](x, torch.ones(1), 1)  # a tensor where an integer goes
    with pytest.raises(TypeError):
        launches[0](7, 7, 1)  # an integer where a pointer goes: data_ptr refuses it
    with pytest.raises(ValueError, match="2 kinds for 3 parameters"):
        ext.launcher(driver.address(True), True, 1, (1, 1, 1), (32, 1, 1), 0, 0, 3, (), int, driver.check, None, b"pi")


def test_float_parameters_fall_back_to_ctypes(ext, monkeypatch):
    monkeypatch.setattr(cuda, "_launch", ext)
    driver = FakeDriver(count=4)
    launch = cuda._native_launcher(_kernel(driver, params=["ptr", "fp32"]), 0, [0, 0], None)
    assert type(launch).__name__ == "function"
    launch(torch.ones(2), 0.5)
    assert driver.calls[0][6][1] & 0xFFFFFFFF == 0x3F000000


def test_without_the_extension_the_runtime_uses_ctypes(monkeypatch):
    monkeypatch.setattr(cuda, "_launch", None)
    launch = cuda._native_launcher(_kernel(FakeDriver(count=3)), 0, [0, 0], None)
    assert type(launch).__name__ == "function"
