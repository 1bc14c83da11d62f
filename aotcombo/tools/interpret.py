"""Run a built program on the CPU, its kernels under Triton's interpreter.

This is how the build is checked without a GPU: the *same* rendered program
and combo-kernel sources that go into the wheel run with ``TRITON_INTERPRET=1``
on CPU tensors, the extern calls through torch's CPU kernels. The program is
loaded as in a wheel, ``aotcombo.runtime`` standing in for its ``_runtime``
(``builder.codegen.check.load_program``): its attention calls go through
``runtime/ops.py``, whose math fallback runs on the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch


def _load(source: str, directory: Path, stem: str):
    path = directory / f"{stem}.py"
    path.write_text(source)
    name = f"aotcombo_interp_{stem}_{abs(hash(source)) & 0xFFFFFFFF:x}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _interpretable_libdevice() -> None:
    """Give ``tl.extra.libdevice`` (stubs outside a real compile) interpreter
    implementations: ``tl.math`` where it has the function, numpy otherwise."""
    import numpy as np
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.runtime.interpreter import TensorHandle

    def numpy_op(ufunc, boolean=False):
        def op(*args):
            data = ufunc(*(a.handle.data for a in args))
            scalar = tl.int1 if boolean else args[0].dtype
            shape = args[0].shape if args[0].type.is_block() else None
            return tl.core.tensor(TensorHandle(data, scalar), tl.block_type(scalar, shape) if shape else scalar)

        return op

    numpy_ops = {
        "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
        "atanh": np.arctanh, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
        "log1p": np.log1p, "expm1": np.expm1, "pow": np.power, "tan": np.tan, "trunc": np.trunc,
        "nearbyint": np.rint, "round": np.round, "copysign": np.copysign, "hypot": np.hypot,
        "fmod": np.fmod, "exp10": lambda x: np.power(10.0, x).astype(x.dtype),
    }
    boolean_ops = {"isinf": np.isinf, "isnan": np.isnan, "signbit": np.signbit, "isfinited": np.isfinite}
    for name in dir(libdevice):
        if name.startswith("_"):
            continue
        if name in boolean_ops:
            setattr(libdevice, name, numpy_op(boolean_ops[name], boolean=True))
        elif hasattr(tl.math, name):  # looked up per call: the interpreter patches tl.math in place
            setattr(libdevice, name, lambda *args, name=name: getattr(tl.math, name)(*args))
        elif name in numpy_ops:
            setattr(libdevice, name, numpy_op(numpy_ops[name]))


def _interpretable_bfloat16() -> None:
    """Triton's interpreter keeps bfloat16 values as their uint16 bits: it multiplies those
    bits in ``tl.dot``, and rounds float32 to bfloat16 toward zero. Give ``tl.dot`` the
    float32 values (exact, as the tensor cores multiply them) and round to nearest even, as
    the GPU does."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    original, original_cast = InterpreterBuilder.create_dot, InterpreterBuilder.cast_impl

    def widened(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        return TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if not (src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16):
            return original_cast(self, src, dst_type)
        bits = np.asarray(src.data, dtype=np.float32).view(np.uint32)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        rounded = np.where(np.isnan(src.data), np.uint16(0x7FC0), rounded)
        return TensorHandle(rounded, tl.bfloat16)

    InterpreterBuilder.create_dot = create_dot
    InterpreterBuilder.cast_impl = cast_impl


def _interpretable_float8() -> None:
    """Triton's interpreter rounds float32 to float8 by adding the first cut-off bit to the
    mantissa (ties away from zero: 2.125 -> 2.25 in e4m3, not 2.0), its carry ORed into the
    exponent (7.75 -> 4.0, not 8.0): float32 to float8_e4m3fn and e5m2 go through torch's
    conversion instead, to nearest even, as the GPU's ``cvt`` (in-range values: Inductor's code
    clamps first)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    targets = {tl.float8e4nv: torch.float8_e4m3fn, tl.float8e5: torch.float8_e5m2}
    original_cast, original_fp_to_fp = InterpreterBuilder.cast_impl, InterpreterBuilder.create_fp_to_fp

    def to_float8(src, dst_type):
        if dst_type.scalar not in targets or src.dtype.scalar != tl.float32:
            return None
        values = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
        return TensorHandle(values.to(targets[dst_type.scalar]).view(torch.uint8).numpy(), dst_type.scalar)

    def cast_impl(self, src, dst_type):
        converted = to_float8(src, dst_type)
        return original_cast(self, src, dst_type) if converted is None else converted

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        converted = to_float8(src, dst_type)
        return original_fp_to_fp(self, src, dst_type, rounding_mode) if converted is None else converted

    InterpreterBuilder.cast_impl = cast_impl
    InterpreterBuilder.create_fp_to_fp = create_fp_to_fp


def _interpretable_atomics() -> None:
    """Triton's interpreter hands an atomic's values to its C++ loop as the array it holds: a
    one-element value broadcast to the pointers (``tl.atomic_add(ptrs, tl.full([1], 1),
    mask)``, as Inductor writes an index_add of ones) is a numpy view of stride 0, read there
    as if dense, past its one element. Give it a dense copy."""
    import numpy as np
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    original = InterpreterBuilder.create_atomic_rmw

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        if not val.data.flags.c_contiguous or val.data.shape != ptr.data.shape:
            val = TensorHandle(np.ascontiguousarray(np.broadcast_to(val.data, ptr.data.shape)), val.dtype)
        return original(self, rmw_op, ptr, val, mask, sem, scope)

    InterpreterBuilder.create_atomic_rmw = create_atomic_rmw


def _interpretable_grid_dependency() -> None:
    """An sm_90 kernel waits for the launch before it (``gdc_wait``) and lets the next start
    (``gdc_launch_dependents``): the interpreter runs launches one after the other, so both
    are nothing there (it has no implementation of them)."""
    from triton.language.extra import cuda

    def nothing(*args, **kwargs):
        return None

    cuda.gdc_wait = cuda.gdc_launch_dependents = nothing


def _interpretable_byte_permutes() -> None:
    """Triton's interpreter runs no inline assembly: the quantized GEMV's byte permutes
    (``quant_gemv.permute_asm``: four bytes made four float32 2^23 + byte, int8's xor'ed with
    0x80 first, and 2^19 + its high nibble; or 1 + byte / 2^15) computed with numpy, any other
    assembly refused."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    from ..builder.kernels.linear.quant_gemv import permute_asm

    known = {permute_asm(signed, high, unit): (signed, high, unit)
             for signed in (False, True) for high in (False, True) for unit in (False, True)}
    original = InterpreterBuilder.create_inline_asm

    class _Call:
        def __init__(self, results):
            self.results = results

        def get_result(self, index):
            return self.results[index]

    def as_floats(bits, magic: int, shift: int = 0):
        return TensorHandle(((bits.astype(np.uint32) << np.uint32(shift)) | np.uint32(magic)).view(np.float32),
                            tl.float32)

    def create_inline_asm(self, asm, constraints, values, types, is_pure, pack):
        if asm not in known:
            return original(self, asm, constraints, values, types, is_pure, pack)
        signed, high, unit = known[asm]
        data = values[0].data.view(np.uint8)
        data = data ^ np.uint8(0x80) if signed else data
        results = [as_floats(data, 0x3F800000, 8) if unit else as_floats(data, 0x4B000000)]
        if high:
            results.append(as_floats(data & np.uint8(0xF0), 0x3F800000, 8) if unit
                           else as_floats(data & np.uint8(0xF0), 0x49000000))
        return _Call(results)

    InterpreterBuilder.create_inline_asm = create_inline_asm


def _run_here(directory: Path) -> None:
    """The child process: load everything from ``directory``, run, save outputs."""
    from ..builder.codegen.check import load_program

    _interpretable_libdevice()
    _interpretable_bfloat16()
    _interpretable_float8()
    _interpretable_atomics()
    _interpretable_grid_dependency()
    _interpretable_byte_permutes()
    job = torch.load(directory / "job.pt", weights_only=False)
    kernels = []
    for name, source, grid in job["combos"]:
        fn = getattr(_load(source, directory, name), name)
        if grid is None:  # the grid depends on a dynamic batch: the program passes it first
            kernels.append(lambda grid, *args, fn=fn: fn[(grid, 1, 1)](*args))
        else:
            kernels.append(lambda *args, fn=fn, grid=grid: fn[(grid, 1, 1)](*args))
    program = load_program(job["program"], "program")
    forward, weights = program.forward, job["weights"]
    if job.get("world"):  # one rank of a tensor-parallel program: its collectives over gloo, on the CPU
        import functools

        import torch.distributed as dist

        from ..runtime.manifest import GROUP

        dist.init_process_group("gloo", init_method=f"file://{job['store']}", rank=job["rank"],
                                world_size=job["world"])
        forward = functools.partial(forward, **{GROUP: dist.group.WORLD.group_name})
    with torch.no_grad():
        if hasattr(program, "prepare"):  # the work on the weights alone, as at load
            weights = program.prepare(kernels, weights, torch.device("cpu"))
        outputs = forward(kernels, weights, torch.device("cpu"), *job["inputs"])
    torch.save({"outputs": outputs, "inputs": job["inputs"], "weights": job["weights"]}, directory / "outputs.pt")
    if job.get("world"):  # gloo's threads left running at exit abort the process ("terminate called ...")
        dist.barrier()
        dist.destroy_process_group()


def run(program: str, combos: Sequence[tuple[str, str, int | None]], weights: Sequence[torch.Tensor],
        inputs: Sequence[torch.Tensor]):
    """Run ``program``'s forward on CPU tensors, in a child process with
    ``TRITON_INTERPRET=1`` (Triton reads it when its own modules load).

    ``combos`` lists ``(name, module source, grid)`` in launch-table order; grid None: the
    program passes each launch's grid first (a dynamic batch). Inputs and weights the
    program updates in place (a model's state) are updated in the caller's tensors."""
    return run_ranks(program, combos, [weights], inputs)[0]


def run_ranks(program: str, combos: Sequence[tuple[str, str, int | None]],
              weights: Sequence[Sequence[torch.Tensor]], inputs: Sequence[torch.Tensor]) -> list:
    """``run`` for each rank's ``weights`` at once: a tensor-parallel program (more than one
    list of weights), each rank a child process, its collectives over torch.distributed's gloo
    backend. Returns each rank's outputs; the state each updates is its own weights'."""
    world = len(weights)
    with tempfile.TemporaryDirectory(prefix="aotcombo-interp-") as tmp:
        env = dict(os.environ, TRITON_INTERPRET="1")
        children = []
        for rank, rank_weights in enumerate(weights):
            directory = Path(tmp) / f"rank{rank}"
            directory.mkdir()
            job = {"program": program, "combos": list(combos), "weights": list(rank_weights), "inputs": list(inputs)}
            if world > 1:
                job.update(rank=rank, world=world, store=str(Path(tmp) / "store"))
            torch.save(job, directory / "job.pt")
            with open(directory / "stderr", "w") as stderr:  # a file: a full pipe would stall the ranks
                children.append((directory, subprocess.Popen(
                    [sys.executable, "-m", "aotcombo.tools.interpret", str(directory)], env=env,
                    stdout=subprocess.DEVNULL, stderr=stderr)))
        results = []
        for rank, (directory, child) in enumerate(children):
            if child.wait() != 0:
                stderr = (directory / "stderr").read_text()
                for _, other in children:
                    other.kill()
                which = f" (rank {rank})" if world > 1 else ""
                raise RuntimeError(f"interpreted run failed{which} (exit status {child.returncode}):\n{stderr[-4000:]}")
            done = torch.load(directory / "outputs.pt", weights_only=False)
            # the program may update inputs, and its state (buffers forward writes), in place
            mine_all = [*inputs, *weights[rank]] if rank == 0 else list(weights[rank])
            theirs_all = [*done["inputs"], *done["weights"]] if rank == 0 else done["weights"]
            for mine, theirs in zip(mine_all, theirs_all):
                if isinstance(mine, torch.Tensor) and not torch.equal(mine, theirs):
                    mine.copy_(theirs)
            results.append(done["outputs"])
        return results


def run_variant(result, variant_index: int = 0, inputs: Sequence[torch.Tensor] = ()):
    """Run one variant of a ``pipeline.BuildResult`` under the interpreter."""
    variant = result.variants[variant_index]
    combos = [(c.name, variant.sources[c.name], None if c.dynamic else c.grid) for c in variant.plan.combos]
    return run(variant.program, combos, result.weights, inputs)


if __name__ == "__main__":
    _run_here(Path(sys.argv[1]))
