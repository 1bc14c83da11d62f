"""The launches launch_overhead.py times: a 1-block Triton kernel of P pointer parameters compiled
here, a C loop calling the driver (compiled with the C compiler here), and each way of launching the
kernel, by name: our runtime's C and ctypes launchers, Triton's, cuLaunchKernel through ctypes, the
driver alone from C.
"""

from __future__ import annotations

import ctypes
import importlib.util
import shutil
import subprocess
from ctypes import c_uint, c_void_p
from pathlib import Path

import torch


def compile_kernel(params: int, workdir: Path):
    """A 1-block, 1-warp Triton kernel with ``params`` fp32 pointers: p0 = sum of the others."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = [f"p{i}" for i in range(params)]
    body = ["    i = tl.arange(0, 32)", "    acc = tl.zeros([32], tl.float32)"]
    body += [f"    acc += tl.load({p} + i)" for p in names[1:]] + ["    tl.store(p0 + i, acc)"]
    source = "\n".join(["import triton", "import triton.language as tl", "", "", "@triton.jit",
                        f"def k{params}({', '.join(names)}):", *body, ""])
    path = workdir / f"launch_kernel_{params}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    major, minor = torch.cuda.get_device_capability()
    src = ASTSource(fn=getattr(module, f"k{params}"), signature={p: "*fp32" for p in names})
    return triton.compile(src, target=GPUTarget("cuda", 10 * major + minor, 32), options={"num_warps": 1})


def _scratch(md, kind):
    return getattr(md, f"{kind}_scratch_size", 0) or 0, getattr(md, f"{kind}_scratch_align", 1) or 1


DRIVER_LOOP = r"""
#include <time.h>
typedef struct { unsigned grid[3], block[3], shared; void *stream, *attrs; unsigned num_attrs; } Config;
typedef int (*Launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                      void **, void **);
typedef int (*LaunchEx)(const Config *, void *, void **, void **);

/* us per launch of n back-to-back launches of a 1-block kernel, or -CUresult */
double launches(void *fn, int ex, void *function, unsigned block, unsigned shared, void *stream, void **params,
                long n) {
    Config c = {{1, 1, 1}, {block, 1, 1}, shared, stream, 0, 0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        int r = ex ? ((LaunchEx)fn)(&c, function, params, 0)
                   : ((Launch)fn)(function, 1, 1, 1, block, 1, 1, shared, stream, params, 0);
        if (r)
            return -r;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n / 1e3;
}

int noop(void) { return 0; }
"""


def driver_loop_library(workdir: Path):
    """DRIVER_LOOP compiled with the C compiler here, or None when there is none."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    (workdir / "driver_loop.c").write_text(DRIVER_LOOP)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "driver_loop.c", "-o", "driver_loop.so"], cwd=workdir, check=True)
    lib = ctypes.CDLL(str(workdir / "driver_loop.so"))
    lib.launches.restype = ctypes.c_double
    lib.launches.argtypes = [c_void_p, ctypes.c_int, c_void_p, c_uint, c_uint, c_void_p, c_void_p, ctypes.c_long]
    return lib


class DriverLoop:
    """``loop(per_sample)``: per_sample launches from C; host_us's batch form."""

    def __init__(self, lib, fn, ex, function, block, shared, stream, argv):
        self.args = (ctypes.cast(fn, c_void_p).value, int(ex), function, block, shared, stream, argv)
        self.lib = lib

    def __call__(self, n):
        us = self.lib.launches(*self.args, n)
        if us < 0:
            raise RuntimeError(f"driver loop: CUresult {-us:.0f}")
        return us


def launchers(rt, compiled, tensors, stream: int, side_stream: int, loop_lib) -> dict:
    """name -> (fn, args): one launch each; a DriverLoop fn times its own batch."""
    md = compiled.metadata
    cuda = rt.cuda
    function = cuda.get_function(cuda.load_module(compiled.asm["cubin"]), md.name)
    kernel = cuda.LoadedKernel(function, (1, 1, 1), md.num_warps, md.shared, ["ptr"] * len(tensors),
                         _scratch(md, "global"), _scratch(md, "profile"), "cuda")
    cases = {}
    native = getattr(cuda, "_launch", None)
    if native is not None:
        cases["aotcombo_c"] = (cuda.native_launcher(kernel, stream, [0, 0], None), tensors)
        cases["aotcombo_c_side_stream"] = (cuda.native_launcher(kernel, side_stream, [0, 0], None), tensors)
    else:
        cases["aotcombo_c"] = (None, f"no C launcher in {cuda.__name__}")
    cases["aotcombo_ctypes"] = (cuda.ctypes_launcher(kernel, stream, [0, 0], None), tensors)

    grid_runner = compiled[(1, 1, 1)]
    cases["triton_grid"] = (grid_runner, tensors)
    run = compiled.run
    cases["triton_run"] = (run, (1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                                 *tensors))

    n = len(tensors)
    values = (ctypes.c_uint64 * (n + 2))(*[t.data_ptr() for t in tensors], 0, 0)
    argv = (c_void_p * (n + 2))(*[ctypes.addressof(values) + 8 * i for i in range(n + 2)])
    typed = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    typed.argtypes, typed.restype = [c_void_p, *[c_uint] * 7, c_void_p, c_void_p, c_void_p], ctypes.c_int
    block = 32 * md.num_warps
    cases["ctypes_typed"] = (typed, (function, 1, 1, 1, block, 1, 1, md.shared, stream, argv, None))
    untyped = ctypes.PyDLL("libcuda.so.1")
    cases["ctypes_prebuilt"] = (untyped.cuLaunchKernel, (
        c_void_p(function), *map(c_uint, (1, 1, 1, block, 1, 1, md.shared)), c_void_p(stream), argv, None))
    config = cuda.LaunchConfig((1, 1, 1), (block, 1, 1), md.shared, stream, None, 0)
    cases["ctypes_ex"] = (untyped.cuLaunchKernelEx, (c_void_p(ctypes.addressof(config)), c_void_p(function), argv,
                                                     None))
    context = c_void_p()
    cases["ctypes_noop"] = (untyped.cuCtxGetCurrent, (ctypes.byref(context),))
    if loop_lib is None:
        cases["driver_loop"] = (None, "no C compiler (cc) on this machine")
    else:
        cases["driver_loop"] = (DriverLoop(loop_lib, untyped.cuLaunchKernel, False, function, block, md.shared,
                                           stream, argv), None)
        cases["driver_loop_ex"] = (DriverLoop(loop_lib, untyped.cuLaunchKernelEx, True, function, block, md.shared,
                                              stream, argv), None)
        cases["driver_loop_ex_side_stream"] = (DriverLoop(loop_lib, untyped.cuLaunchKernelEx, True, function, block,
                                                          md.shared, side_stream, argv), None)
        if native is not None:
            noop = ctypes.cast(loop_lib.noop, c_void_p).value
            cases["c_noop_driver"] = (native.launcher(noop, function, (1, 1, 1), (block, 1, 1), md.shared, stream,
                                                      (0, 0), torch.Tensor.data_ptr, print, None, b"p" * n, False),
                                      tensors)
    cases["_keep"] = (values, argv, config, kernel)
    return cases
