"""Host time per kernel launch, per input guard and per model call, on a GPU.

    python benchmarks/launch_overhead.py --out launch_overhead.json [--params 4,32]
        [--per-sample 300] [--samples 31] [--packages branches,transformer_block,...]
        [--runtime PACKAGE|checkout]

The runtime timed is an installed package's ``_runtime`` (the first of --packages that
imports, or --runtime PACKAGE): the code a wheel ships, with its compiled C launcher;
``--runtime checkout`` takes aotcombo/runtime from this checkout (no C launcher there).

Launchers, of a 1-block Triton kernel with P pointer parameters compiled here by
triton.compile (the same tensors each launch, on torch's current stream, the legacy default
stream 0, unless the name says "side stream": a stream made by torch.cuda.Stream()):

  aotcombo_c           our runtime's C launcher (_launch.c): cuda._native_launcher(...)(*tensors)
  aotcombo_c_by_name   the same, asking each tensor for data_ptr by method name, not descriptor
  aotcombo_ctypes      our runtime's ctypes launcher: cuda.ctypes_launcher(...)(*tensors)
  triton_grid          Triton's CompiledKernel as user code calls it: compiled[grid](*tensors)
  triton_run           Triton's launcher with everything prebuilt: compiled.run(grid..., stream, ...)
  ctypes_typed         cuLaunchKernel through ctypes with argtypes, Python ints, prebuilt kernelParams
  ctypes_prebuilt      cuLaunchKernel, untyped: every argument a prebuilt ctypes object (11 of them)
  ctypes_ex            cuLaunchKernelEx, prebuilt (4 arguments): the call the ctypes launcher makes
  ctypes_noop          cuCtxGetCurrent through ctypes: what one foreign call costs, driver aside
  driver_loop          cuLaunchKernel called from a C loop (compiled here with cc): the driver alone,
  driver_loop_ex       no Python at all; the floor of any launcher. _ex: cuLaunchKernelEx
  c_noop_driver        the C launcher calling a no-op instead of the driver: its own cost, data_ptr
                       calls included; aotcombo_c less this and driver_loop_ex is what the driver
                       costs more between Python code than in a tight C loop (caches, branches)

Host us per launch: the median over samples of (time of per-sample launches) / per-sample,
with the GPU drained before each sample, outside the timed loop; --per-sample is kept small
(300) so that the launch queue never fills and the GPU never sets the pace, even where a
launch costs less host time than the kernel takes on the GPU. Device us per launch is printed
next to it: the GPU's own time per launch back to back (queued while it slept, timed by
events).

Guards: make_input_check (the per-call check) and check_inputs (the one that names a mismatch),
for 1 input and for 256. Calls: each sample package installed (on PYTHONPATH), per load
mode: host us per call (batches of --calls-per-sample calls) and device us per call; the
op-by-op modes with the C launcher, and with ctypes (``_ctypes``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from launch_overhead_launchers import DriverLoop, compile_kernel, driver_loop_library, launchers

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ("branches", "transformer_block", "adam_step", "conv_block")


def _runtime(choice: str, packages: list[str]):
    """The runtime to time: an installed package's ``_runtime`` (see the module docstring), or
    aotcombo/runtime from this checkout, imported on its own as a package carries it."""
    for name in ([choice] if choice != "checkout" else []) if choice else packages:
        try:
            return importlib.import_module(f"{name}._runtime"), f"{name}._runtime (installed)"
        except ImportError:
            if choice:
                raise
    spec = importlib.util.spec_from_file_location("aotcombo_runtime", ROOT / "aotcombo" / "runtime" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "aotcombo" / "runtime")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["aotcombo_runtime"] = module
    spec.loader.exec_module(module)
    return module, "aotcombo/runtime (checkout)"


# --- timing ------------------------------------------------------------------------------

def host_us(fn, args, per_sample, samples) -> float:
    """Median host microseconds per ``fn(*args)``; the GPU is drained outside the timed loops."""
    fn(*args)
    results = []
    for _ in range(samples):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(per_sample):
            fn(*args)
        results.append((time.perf_counter() - start) / per_sample * 1e6)
    torch.cuda.synchronize()
    return statistics.median(results)


def device_us(fn, args, count=200) -> float:
    """GPU microseconds per ``fn(*args)`` run back to back: ``count`` calls are queued while the
    GPU sleeps, then CUDA events time them on the GPU alone."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)  # some 50 ms: the queue fills while the GPU is busy
    start.record()
    for _ in range(count):
        fn(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / count


def batch_host_us(loop, per_sample, samples) -> float:
    """host_us for a function that runs and times its own batch (DriverLoop)."""
    loop(per_sample)
    results = []
    for _ in range(samples):
        torch.cuda.synchronize()
        results.append(loop(per_sample))
    torch.cuda.synchronize()
    return statistics.median(results)


def bench_launches(rt, params_list, per_sample, samples, workdir) -> dict:
    results = {}
    stream = torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    loop_lib = driver_loop_library(workdir)
    for params in params_list:
        compiled = compile_kernel(params, workdir)
        tensors = [torch.ones(32, device="cuda") for _ in range(params)]
        cases = launchers(rt, compiled, tensors, stream, side.cuda_stream, loop_lib)
        keep = cases.pop("_keep")
        row = {}
        for name, (fn, args) in cases.items():
            if fn is None:
                row[name] = {"error": args}
                continue
            try:
                if isinstance(fn, DriverLoop):
                    row[name] = {"host_us": batch_host_us(fn, per_sample, samples)}
                else:
                    row[name] = {"host_us": host_us(fn, args, per_sample, samples)}
                    if name != "c_noop_driver" and "side_stream" not in name:
                        row[name]["device_us"] = device_us(fn, args)
            except Exception as e:  # noqa: BLE001 (a Triton version whose API differs: reported)
                row[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
        torch.cuda.synchronize()
        expected = sum(tensors[1:], torch.zeros(32, device="cuda"))
        for name in ("aotcombo_c", "aotcombo_ctypes"):
            launch = cases[name][0]
            if launch is None:
                continue
            tensors[0].fill_(-1.0)
            launch(*tensors)
            torch.cuda.synchronize()
            row[f"{name}_correct"] = bool(torch.equal(tensors[0], expected)) if params > 1 else True
        results[str(params)] = row
        del keep
    return results


# --- guards ---------------------------------------------------------------------------

def bench_guards(rt, samples) -> dict:
    results = {}
    device = torch.device("cuda", torch.cuda.current_device())
    for count, shape, dtype in ((1, (4, 256, 768), torch.bfloat16), (256, (1000,), torch.float32)):
        tensors = tuple(torch.empty(shape, dtype=dtype, device=device) for _ in range(count))
        specs = [rt.InputSpec(f"x{i}", dtype, tuple(shape), t.stride(), 16, False) for i, t in enumerate(tensors)]
        guard = rt.make_input_check(specs, device)
        per_sample = max(10, 20000 // count)
        results[str(count)] = {
            "make_guard_us": host_us(guard, (tensors,), per_sample, samples),
            "check_inputs_us": host_us(rt.check_inputs, (specs, tensors, device), per_sample, samples),
        }
    return results


# --- whole calls of the sample packages ---------------------------------------------------------

MODES = {  # mode -> (load options, static inputs); a mode ending in _ctypes forces the ctypes launcher
    "op_by_op": ({"graphs": False}, False),
    "op_by_op_ctypes": ({"graphs": False}, False),
    "op_by_op_unchecked": ({"graphs": False, "check_inputs": False}, False),
    "op_by_op_unchecked_ctypes": ({"graphs": False, "check_inputs": False}, False),
    "graph": ({"graphs": True}, False),
    "graph_static_in_out": ({"graphs": True, "copy_outputs": False}, True),
    "graph_static_in_out_unchecked": ({"graphs": True, "copy_outputs": False, "check_inputs": False}, True),
}


def _inputs(manifest) -> tuple:
    out = []
    for spec in manifest.inputs:
        t = torch.empty_strided(spec.shape, spec.stride, dtype=getattr(torch, spec.dtype), device="cuda")
        out.append(t.normal_() if t.is_floating_point() else t.zero_())
    return tuple(out)


def bench_calls(names, calls_per_sample, samples) -> dict:
    results = {}
    for name in names:
        try:
            package = importlib.import_module(name)
        except ImportError:
            results[name] = {"error": "not installed"}
            continue
        row, inputs = {}, _inputs(package.manifest)
        cuda = package._runtime.cuda
        default = cuda.launcher
        row["launcher"] = default.__name__
        for mode, (options, static) in MODES.items():
            cuda.launcher = cuda.ctypes_launcher if mode.endswith("_ctypes") else default  # read at bind
            try:
                model = package.load("cuda", **options)
                args = model.static_inputs() if static else inputs
                if static:
                    for s, x in zip(args, inputs):
                        s.copy_(x)
                row[mode] = {"host_us": host_us(model, args, calls_per_sample, samples),
                             "device_us": device_us(model, args, calls_per_sample)}
                del model
            finally:
                cuda.launcher = default
        results[name] = row
    return results


# --- report ---------------------------------------------------------------------------

def report(result: dict) -> None:
    print(f"device: {result['device']}; torch {result['torch']}, triton {result['triton']}, "
          f"python {result['python']}; runtime {result['runtime']}; launcher {result['launcher']}")
    print(f"host us: median of {result['samples']} samples of {result['per_sample']} launches")
    for params, row in result["launch"].items():
        print(f"\nlaunch of a 1-block kernel with {params} pointer parameters (us per launch)")
        print(f"  {'launcher':27s} {'host':>8s} {'device':>8s}")
        for name, r in row.items():
            if name.endswith("_correct"):
                continue
            if "error" in r:
                print(f"  {name:27s} {r['error']}")
            else:
                device = f"{r['device_us']:8.2f}" if "device_us" in r else f"{'':8s}"
                print(f"  {name:27s} {r['host_us']:8.2f} {device}")
        print("  launch correct: " + ", ".join(f"{k[:-8]} {v}" for k, v in row.items() if k.endswith("_correct")))
    print("\nguards (us per call)")
    for count, r in result["guards"].items():
        print(f"  {count:>4s} inputs: make_input_check {r['make_guard_us']:8.2f}   "
              f"check_inputs {r['check_inputs_us']:8.2f}")
    if result.get("calls"):
        print("\nwhole calls (us per call: host / device)")
        for name, row in result["calls"].items():
            if "error" in row:
                print(f"  {name}: {row['error']}")
                continue
            cells = "  ".join(f"{mode} {r['host_us']:.1f}/{r['device_us']:.1f}" for mode, r in row.items()
                              if isinstance(r, dict))
            print(f"  {name} ({row['launcher']}): {cells}")
    print("\nsummary: host us per launch, 1-block kernel (C launcher / ctypes launcher / triton_run / "
          "driver alone from C)")
    for params, row in result["launch"].items():
        cells = [row.get(k, {}).get("host_us") for k in ("aotcombo_c", "aotcombo_ctypes", "triton_run",
                                                           "driver_loop_ex")]
        print(f"  {params:>3s} pointers: " + " / ".join("-" if c is None else f"{c:.2f}" for c in cells))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--params", default="4,32", help="pointer parameters of the kernel, comma-separated")
    parser.add_argument("--per-sample", type=int, default=300, help="launches per timed sample")
    parser.add_argument("--samples", type=int, default=31)
    parser.add_argument("--packages", default=",".join(SAMPLES), help="sample packages to time whole calls of "
                        "('' for none)")
    parser.add_argument("--calls-per-sample", type=int, default=20)
    parser.add_argument("--runtime", help="installed package whose _runtime to time, or 'checkout' (default: the "
                        "first of --packages installed, else the checkout)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton

    torch.zeros(1, device="cuda")  # torch's primary context, current on this thread
    names = [n for n in args.packages.split(",") if n]
    rt, where = _runtime(args.runtime, names)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "runtime": where, "launcher": rt.cuda.launcher.__name__,
              "per_sample": args.per_sample, "samples": args.samples}
    with tempfile.TemporaryDirectory() as tmp:
        params = [int(p) for p in args.params.split(",") if p]
        result["launch"] = bench_launches(rt, params, args.per_sample, args.samples, Path(tmp))
    result["guards"] = bench_guards(rt, args.samples)
    result["calls"] = bench_calls(names, args.calls_per_sample, args.samples)
    report(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
