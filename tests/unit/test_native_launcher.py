"""The C launcher (aotcombo/runtime/_launch.c) without a GPU: it compiles reproducibly, imports,
and calls a stand-in "driver function" (a ctypes callback recording what it is given) exactly
as the ctypes launcher does, with the same errors. The GPU side is in test_gpu_runtime.py."""

from __future__ import annotations

import ctypes
import struct
import tempfile
from ctypes import POINTER, c_int, c_uint64, c_void_p

import pytest
import torch

from aotcombo.builder.compile import native
from aotcombo.runtime import cuda

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

LAUNCH_EX = ctypes.CFUNCTYPE(c_int, POINTER(cuda.LaunchConfig), c_void_p, POINTER(c_void_p), c_void_p)


@pytest.fixture(scope="module")
def ext():
    from aotcombo.testing.native import compiled

    return compiled("_launch")


class FakeDriver:
    """A cuLaunchKernelEx stand-in that records each call and returns ``result``; ``launch`` is
    an untyped ctypes function pointer, as cuda._Driver's is."""

    def __init__(self, count: int, result: int = 0):
        self.calls, self.attributes, self.result, self.count = [], [], result, count
        self._callback = LAUNCH_EX(self._launch_ex)
        self.launch = ctypes.PYFUNCTYPE(c_int)(ctypes.cast(self._callback, c_void_p).value)
        self.launch.argtypes, self.launch.__name__ = None, "cuLaunchKernelEx"

    @property
    def address(self) -> int:
        return ctypes.cast(self.launch, c_void_p).value

    def _launch_ex(self, config, function, params, extra):
        c = config.contents
        attributes = ctypes.cast(c.attrs, POINTER(cuda.LaunchAttribute))
        self.attributes.append([(attributes[i].id, attributes[i].value[0] & 0xFFFFFFFF) for i in range(c.num_attrs)])
        values = [ctypes.cast(params[i], POINTER(c_uint64))[0] for i in range(self.count)]
        self.calls.append((function, tuple(c.grid), tuple(c.block), c.shared, c.stream or 0, values, extra))
        return self.result

    def check(self, call: str, result: int) -> None:  # cuda._Driver.check's contract
        if result:
            raise cuda.CudaError(f"{call} failed: CUDA_ERROR_{result}: stand-in")


def _kernel(driver, n=3, params=None):
    kernel = object.__new__(cuda.LoadedKernel)  # no GPU: the fields bind() and the launchers read
    kernel.driver, kernel.function, kernel.grid, kernel.block, kernel.shared = driver, 0xF00D, (7, 2, 1), 128, 4096
    kernel.params, kernel.pdl = tuple(params or ["ptr"] * n), False
    return kernel


def _launcher(ext, driver, kinds=b"ppp", tail=(), pointer_of=torch.Tensor.data_ptr, on_error=None, keep=None,
              grid=(1, 1, 1), shared=0, stream=0, function=1, pdl=False):
    return ext.launcher(driver.address, function, grid, (32, 1, 1), shared, stream, tail, pointer_of,
                        on_error or driver.check, keep, kinds, pdl)


# --- the build ---------------------------------------------------------------------------


def test_compiles_reproducibly_with_no_paths_inside(tmp_path):
    first, problem = native._compile.__wrapped__()
    second, _ = native._compile.__wrapped__()
    assert problem is None and first == second and set(first) == {"_launch.abi3.so", "_guard.abi3.so"}
    for data in first.values():
        assert data.startswith(b"\x7fELF")
        for banned in (tempfile.gettempdir().encode() + b"/", str(native.RUNTIME).encode(), b"aotcombo-native"):
            assert banned not in data
    assert {p.name: p.read_bytes() for p in native.compile_to(tmp_path).values()} == first


@pytest.mark.parametrize("filename", sorted(native.SOURCES))
def test_compiles_without_warnings_against_the_limited_api(filename, tmp_path):
    """Each source defines Py_LIMITED_API (3.10): a call outside the stable ABI would be undeclared,
    which FLAGS make an error; here any warning at all fails."""
    import subprocess
    import sysconfig

    source = native.SOURCES[filename]
    assert b"#define Py_LIMITED_API 0x030A0000" in source.read_bytes()
    assert "-Werror=implicit-function-declaration" in native.FLAGS
    run = subprocess.run([*native.compiler(), *native.FLAGS, "-Wextra", "-Werror",
                          "-I" + sysconfig.get_paths()["include"],
                          str(source), "-o", str(tmp_path / filename)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stderr == "", run.stderr


def test_no_compiler_is_one_warning_and_no_file(monkeypatch, capsys):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    native._compile.cache_clear()
    try:
        assert native.extensions() is None and native.extensions() is None
    finally:
        native._compile.cache_clear()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("aotcombo: warning: no C compiler (/nonexistent/cc)"), err
    assert "ctypes" in err[0]


def test_native_off_by_environment_is_silent(monkeypatch, capsys):
    monkeypatch.setenv("AOTCOMBO_NATIVE", "0")
    assert native.extensions() is None
    assert capsys.readouterr().err == ""


# --- the extension on its own --------------------------------------------------------------


def test_driver_gets_grid_block_stream_and_arguments(ext):
    driver = FakeDriver(count=5)
    launch = ext.launcher(driver.address, 0xBEEF, (4, 5, 6), (64, 1, 1), 1024, 0xABC, (111, 222), int,
                          driver.check, None, b"ppp", False)
    assert launch(10, 20, 2**64 - 1) is None
    assert driver.calls == [(0xBEEF, (4, 5, 6), (64, 1, 1), 1024, 0xABC, [10, 20, 2**64 - 1, 111, 222], None)]


def test_tensors_data_pointers(ext):
    driver = FakeDriver(count=2)
    tensors = [torch.ones(4), torch.arange(10.0)[3:]]
    _launcher(ext, driver, b"pp")(*tensors)
    assert driver.calls[0][5] == [t.data_ptr() for t in tensors]


def test_scalar_kinds(ext):
    driver = FakeDriver(count=4)
    _launcher(ext, driver, b"pifd")(torch.ones(2), -3, 0.5, -0.25)
    pointer, integer, fp32, fp64 = driver.calls[0][5]
    assert integer == 2**64 - 3 and fp32 & 0xFFFFFFFF == 0x3F000000 and fp32 >> 32 == 0
    assert struct.unpack("<d", fp64.to_bytes(8, "little"))[0] == -0.25


def test_argument_count_and_type_errors(ext):
    driver = FakeDriver(count=2)
    launch = _launcher(ext, driver, b"pp")
    with pytest.raises(TypeError, match=r"^kernel takes 2 arguments, got 3$"):
        launch(torch.ones(1), torch.ones(1), torch.ones(1))
    with pytest.raises(TypeError, match=r"^kernel takes 2 arguments, got 0$"):
        launch()
    with pytest.raises(TypeError):
        launch(torch.ones(1), 5)  # not a tensor: data_ptr refuses it
    with pytest.raises(TypeError):
        launch(x=1)  # no keywords
    with pytest.raises(TypeError):
        _launcher(ext, driver, b"pi")(torch.ones(1), torch.ones(1))  # a tensor where an integer goes
    assert driver.calls == []
    with pytest.raises(TypeError):
        ext.launcher(driver.address, 1, (1, 1), (32, 1, 1), 0, 0, (), int, driver.check, None, b"pp", False)
    with pytest.raises(ValueError, match="unknown parameter kind x"):
        _launcher(ext, driver, b"px")
    with pytest.raises(ValueError):
        ext.launcher(0, 1, (1, 1, 1), (32, 1, 1), 0, 0, (), int, driver.check, None, b"pp", False)


def test_pointer_of_errors_and_overflow_propagate(ext):
    driver = FakeDriver(count=1)

    def broken(_):
        raise KeyError("boom")

    for pointer_of, error in ((broken, KeyError), (lambda _: -1, OverflowError), (lambda _: "0", TypeError)):
        with pytest.raises(error):
            _launcher(ext, driver, b"p", pointer_of=pointer_of)(object())
    assert driver.calls == []


def test_failed_launch_raises_the_drivers_error(ext):
    driver = FakeDriver(count=1, result=700)
    launch = _launcher(ext, driver, b"p", pointer_of=int,
                       on_error=lambda code: driver.check("cuLaunchKernelEx", code))
    with pytest.raises(cuda.CudaError, match=r"^cuLaunchKernelEx failed: CUDA_ERROR_700: stand-in$"):
        launch(1)
    silent = _launcher(ext, driver, b"p", pointer_of=int, on_error=lambda code: None)
    with pytest.raises(RuntimeError, match=r"^cuLaunchKernelEx failed: CUresult 700$"):
        silent(1)


def test_keeps_what_it_is_given_alive(ext):
    import gc
    import weakref

    class Buffer:
        pass

    driver, buffer = FakeDriver(count=0), Buffer()
    ref = weakref.ref(buffer)
    launch = _launcher(ext, driver, b"", keep=buffer)
    del buffer
    gc.collect()
    assert ref() is not None
    launch()
    del launch
    gc.collect()
    assert ref() is None and len(driver.calls) == 1


# --- through the runtime: the same calls and errors as the ctypes launcher -------------------------


@pytest.mark.parametrize("params, args", [
    (["ptr"] * 3, lambda: [torch.randn(8) for _ in range(3)]),
    (["ptr", "i32", "i64", "fp32", "fp64", "u8"], lambda: [torch.randn(8), 7, -3, 0.5, -2.5, 255]),
])
def test_runtime_launchers_agree(ext, monkeypatch, params, args):
    monkeypatch.setattr(cuda, "_launch", ext)
    driver = FakeDriver(count=len(params) + 2)
    values = args()
    launches = {name: make(_kernel(driver, params=params), 0x5EED, [0, 4096], None)
                for name, make in (("c", cuda.native_launcher), ("ctypes", cuda.ctypes_launcher))}
    assert type(launches["c"]).__name__ == "builtin_function_or_method"
    assert type(launches["ctypes"]).__name__ == "function"
    for name in ("c", "ctypes"):
        launches[name](*values)
    c_call, ctypes_call = driver.calls
    assert c_call[:5] == ctypes_call[:5] == (0xF00D, (7, 2, 1), (128, 1, 1), 4096, 0x5EED)
    assert c_call[5][0] == ctypes_call[5][0] == values[0].data_ptr() and c_call[5][-2:] == [0, 4096]
    for k, (kind, c_value, ctypes_value) in enumerate(zip(params, c_call[5], ctypes_call[5])):
        width = {"i32": 32, "fp32": 32, "u8": 8}.get(kind, 64)  # the driver reads each parameter's own width
        mask = (1 << width) - 1
        assert c_value & mask == ctypes_value & mask, (k, kind)
    driver.result = 719
    errors = {}
    for name, launch in launches.items():
        with pytest.raises(cuda.CudaError) as info:
            launch(*values)
        errors[name] = str(info.value)
        with pytest.raises(TypeError) as info:
            launch(*values[:2])
        errors[name + " count"] = str(info.value)
    assert errors["c"] == errors["ctypes"] == "cuLaunchKernelEx failed: CUDA_ERROR_719: stand-in"
    assert errors["c count"] == errors["ctypes count"] == f"kernel takes {len(params)} arguments, got 2"


@pytest.mark.parametrize("pdl", [False, True])
def test_programmatic_launch_attribute(ext, monkeypatch, pdl):
    """A kernel that waits for the one before it (griddepcontrol.wait) is launched with
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6) set to 1, by both launchers;
    any other kernel with no attribute at all."""
    monkeypatch.setattr(cuda, "_launch", ext)
    driver = FakeDriver(count=3)
    kernel = _kernel(driver, n=1)
    kernel.pdl = pdl
    tensor = torch.randn(4)
    for make in (cuda.native_launcher, cuda.ctypes_launcher):
        make(kernel, 0, [0, 0], None)(tensor)
    expected = [(cuda.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)] if pdl else []
    assert driver.attributes == [expected, expected]
    assert driver.calls[0][:6] == driver.calls[1][:6]
