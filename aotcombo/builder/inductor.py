"""Every use of TorchInductor's private API, in one place.

``trace(module, example_inputs, arch)`` runs the model through
``torch.export`` and Inductor for device ``cuda`` on fake tensors, on a machine
with no GPU, and returns the result as ``aotcombo.graph`` plain data.

How: a *virtual GPU* stands in for the CUDA queries Inductor makes
(capability, properties, rng state) and for Triton's active driver. Inductor
is asked for its FX wrapper (``config.fx_wrapper``), whose converter already
turns wrapper lines (allocations, views, extern calls, fallbacks) into an FX
graph; we subclass it only where it would compile Triton kernels, recording
the kernel source and a marker call instead. The FX graph is then read into
``graph.Graph`` and the compile is stopped before Inductor loads any module.

A torch upgrade should touch this file only.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import operator
import re
import traceback
import types
from typing import Any, Iterator
from unittest import mock

import sympy
import torch

from . import decompositions, fused_linears, graph as g, linears
from ..errors import UnsupportedModelError
from ..runtime.manifest import BATCH, Dynamic
from .usercode import library_where, where

SUPPORTED_TORCH = "2.14"

# What Inductor's kernel sources import: the combo-kernel modules start with
# these lines, and compile workers preload the module.
KERNEL_RUNTIME_MODULE = "torch._inductor.runtime.triton_helpers"
KERNEL_PRELUDE = (
    "from torch._inductor.runtime import triton_helpers",
    "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math",
)
# Config modules whose settings change what a trace produces (the trace cache keys on them).
TRACE_CONFIG_MODULES = (
    "torch._inductor.config",
    "torch._dynamo.config",
    "torch._functorch.config",
    "torch.fx.experimental._config",
    "torch._export.config",
)



def trace_config_changes() -> dict[str, dict | None]:
    """The settings of each imported trace config module whose value is not the default
    (None: the module cannot be read). A module not imported yet holds its defaults, and
    importing Inductor's just to read it costs a second.

    Compared by value, not by torch's notion of "set": after a ``config.patch`` is undone
    (as every trace does) settings hold their defaults again but count as set, which would
    make a process that has traced key differently from a fresh one."""
    import sys

    out: dict[str, dict | None] = {}
    for name in TRACE_CONFIG_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        try:
            current = module._get_dict()
            defaults = {key: entry.default for key, entry in module._config.items()}
        except Exception:  # noqa: BLE001 - an unknown config module: take every value
            try:
                out[name] = module.get_config_copy()
            except Exception:  # noqa: BLE001
                out[name] = None
            continue
        changed = {}
        for key, value in current.items():
            try:
                same = key in defaults and bool(value == defaults[key])
            except Exception:  # noqa: BLE001
                same = False
            if not same:
                changed[key] = value
        if changed:
            out[name] = changed
    return out

# --- the virtual GPU ------------------------------------------------------------

# Properties of a representative part for each arch. Inductor reads the SM
# count for its heuristics (our fixed block rules do not), and the capability
# to decide what the arch supports (bf16, fp8, ...).
_PARTS = {
    80: dict(name="A100 (virtual)", multi_processor_count=108, shared_memory_per_block_optin=166912),
    86: dict(name="RTX A6000 (virtual)", multi_processor_count=84, shared_memory_per_block_optin=101376),
    89: dict(name="L40S (virtual)", multi_processor_count=142, shared_memory_per_block_optin=101376),
    90: dict(name="H100 (virtual)", multi_processor_count=132, shared_memory_per_block_optin=232448),
    100: dict(name="B200 (virtual)", multi_processor_count=148, shared_memory_per_block_optin=232448),
    120: dict(name="RTX 5090 (virtual)", multi_processor_count=170, shared_memory_per_block_optin=101376),
}


# Dense tensor-core peaks (TFLOPS; 16-bit inputs, and float32 on the CUDA cores, as torch runs
# float32 matmuls by default) of those parts: Inductor decides by them whether a matmul is
# compute-bound (``pad_mm``), where it would ask pynvml for the clock.
_PEAK_TFLOPS = {80: (312, 19.5), 86: (155, 38.7), 89: (362, 91.6), 90: (989, 67), 100: (2250, 80), 120: (419, 105)}


def _peak_tflops(arch: int, dtype: torch.dtype) -> float:
    half, single = _PEAK_TFLOPS.get(arch, _PEAK_TFLOPS[90])
    return half if dtype in (torch.float16, torch.bfloat16) else single


def _should_pad_by_rule(match, mat1, mat2, op, input=None) -> bool:
    """Inductor's ``pad_mm`` choice with no GPU to time on: a 16-bit matmul whose sizes are not
    multiples of 8 (``can_pad``, checked before) is padded when it is compute-bound on the
    target, the case where Inductor would time both ways. Unpadded, cuBLAS falls back to an
    unaligned tensor-core kernel: GPT-2's LM head (vocab 50257) at 4 x 256 tokens took 837 us
    on an H100, against 174 us for Inductor's padded one (the weight copied 49 us, then the
    matmul 125 us). float32 matmuls (CUDA cores, by torch's default) are left as they are."""
    from torch._inductor.fx_passes import pad_mm

    if mat1.dtype not in (torch.float16, torch.bfloat16):
        return False

    if op is torch.ops.aten.bmm:
        m, k, n = mat1.shape[1], mat1.shape[2], mat2.shape[2]
    else:
        m, k, n = mat1.shape[0], mat1.shape[1], mat2.shape[1]
    m, k, n = pad_mm.hint_symbols((m, k, n))
    return pad_mm.is_mm_compute_bound(m, k, n, mat1.dtype)


def _device_properties(arch: int) -> types.SimpleNamespace:
    part = _PARTS.get(arch, _PARTS[90])
    return types.SimpleNamespace(
        major=arch // 10,
        minor=arch % 10,
        regs_per_multiprocessor=65536,
        max_threads_per_multi_processor=2048 if arch < 100 else 1536,
        max_threads_per_block=1024,
        warp_size=32,
        total_memory=80 * 2**30,
        L2_cache_size=50 * 2**20,
        gcnArchName="",
        uuid="virtual",
        **part,
    )


class _VirtualTritonDriver:
    """Triton's ``driver.active`` for a GPU that is not there."""

    def __init__(self, arch: int, props: types.SimpleNamespace):
        from triton.backends.compiler import GPUTarget

        self._target = GPUTarget("cuda", arch, 32)
        props_dict = {
            "max_shared_mem": props.shared_memory_per_block_optin,
            "multiprocessor_count": props.multi_processor_count,
            "max_num_regs": props.regs_per_multiprocessor,
            "warpSize": 32,
            "sm_clock_rate": 1_980_000,
            "mem_clock_rate": 2_619_000,
            "mem_bus_width": 5120,
        }
        self.utils = types.SimpleNamespace(get_device_properties=lambda device=0: props_dict)

    def get_current_target(self):
        return self._target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_device_interface(self):
        return torch.cuda

    def get_active_torch_device(self):
        return torch.device("cuda", 0)

    def is_active(self):
        return True


def _moves_to_gpu(args, kwargs) -> bool:
    """Whether an op's arguments name a device other than the CPU (a copy there)."""
    device = (kwargs or {}).get("device")
    if device is None:
        device = next((a for a in args if isinstance(a, torch.device)), None)
    return isinstance(device, (torch.device, str)) and torch.device(device).type != "cpu"


def _no_constant_device_moves(dispatch):
    """FakeTensorMode's dispatch, folding no move of a literal to the GPU: it computes an op
    whose tensors are all literals (``torch.tensor(3)``) on their real values, and
    ``avoid_device_init`` stops that only for ``_to_copy``, not for ``to.dtype_layout``
    (``type_as``), which would then need a real GPU. The literal becomes an ordinary fake."""
    def dispatch_impl(self, func, types, args, kwargs):
        if _moves_to_gpu(args, kwargs):
            for arg in args:
                if getattr(arg, "constant", None) is not None:
                    arg.constant = None
        return dispatch(self, func, types, args, kwargs)

    return dispatch_impl


def _no_constant_device_moves_in_proxies(proxy_call):
    """The same for make_fx's own constants (``proxy_tensor.proxy_call``): a literal index
    list moved to the GPU (Falcon's ``fused_qkv[..., [-2], :]``) is not computed for real."""
    from torch.fx.experimental import proxy_tensor

    def call(proxy_mode, func, pre_dispatch, args, kwargs):
        if not _moves_to_gpu(args, kwargs):
            return proxy_call(proxy_mode, func, pre_dispatch, args, kwargs)
        limit = proxy_tensor.CONSTANT_NUMEL_LIMIT
        proxy_tensor.CONSTANT_NUMEL_LIMIT = 0  # no output is small enough to be a constant
        try:
            return proxy_call(proxy_mode, func, pre_dispatch, args, kwargs)
        finally:
            proxy_tensor.CONSTANT_NUMEL_LIMIT = limit

    return call


@contextlib.contextmanager
def virtual_gpu(arch: int) -> Iterator[None]:
    """Make torch, dynamo, inductor and triton believe a GPU of ``arch`` is here."""
    import triton
    from torch._dynamo import device_interface as di
    from torch._inductor.fx_passes import joint_graph
    from torch._inductor.runtime.hints import DeviceProperties

    props = _device_properties(arch)
    capability = (props.major, props.minor)
    noop = lambda *a, **k: None  # noqa: E731
    cuda = "torch.cuda."
    cuda_patches = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": noop,
        "synchronize": noop,
        "_exchange_device": lambda d: 0,
        "_maybe_exchange_device": lambda d: 0,
        "get_device_capability": lambda d=None: capability,
        "get_device_properties": lambda d=None: props,
        "is_bf16_supported": lambda *a, **k: True,
        "get_rng_state": lambda *a, **k: torch.zeros(16, dtype=torch.uint8),
        "set_rng_state": noop,
    }
    interface_patches = {
        "is_available": lambda: True,
        "current_device": lambda: 0,
        "device_count": lambda: 1,
        "set_device": noop,
        "synchronize": noop,
        "get_device_properties": lambda d=None: props,
        "get_compute_capability": lambda d=None: arch,
        "is_bf16_supported": lambda *a, **k: True,
        "exchange_device": lambda d: 0,
        "maybe_exchange_device": lambda d: 0,
    }
    original_lazy_init = joint_graph.lazy_init
    # What FakeTensorMode does by itself when it sees no GPU (it will see ours):
    # a no-op CUDA device guard, torch.tensor() literals kept on the CPU, and no
    # constant folding of a move to the GPU (DeBERTa's ``torch.tensor(mid - 1).type_as(x)``
    # would otherwise copy the literal to a real GPU while tracing).
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch._C._ensureCUDADeviceGuardSet()
    only_lift_cpu = torch._C._only_lift_cpu_tensors()
    torch._C._set_only_lift_cpu_tensors(True)
    with contextlib.ExitStack() as stack:
        stack.callback(torch._C._set_only_lift_cpu_tensors, only_lift_cpu)
        if isinstance(getattr(FakeTensorMode, "avoid_device_init", None), property):
            stack.enter_context(mock.patch.object(FakeTensorMode, "avoid_device_init", property(lambda self: True)))
        stack.enter_context(mock.patch.object(FakeTensorMode, "_dispatch_impl",
                                              _no_constant_device_moves(FakeTensorMode._dispatch_impl)))
        from torch.fx.experimental import proxy_tensor

        stack.enter_context(mock.patch.object(proxy_tensor, "proxy_call",
                                              _no_constant_device_moves_in_proxies(proxy_tensor.proxy_call)))
        for name, fn in cuda_patches.items():
            stack.enter_context(mock.patch(cuda + name, fn))
        for name, fn in interface_patches.items():
            stack.enter_context(mock.patch.object(di.CudaInterface, name, staticmethod(fn)))
        for name in ("get_device_properties", "current_device"):
            stack.enter_context(
                mock.patch.object(di.CudaInterface.Worker, name, staticmethod(interface_patches[name]))
            )
        # Pattern-matcher setup traces example graphs on real tensors of the
        # input device; the patterns themselves are device independent.
        stack.enter_context(
            mock.patch.object(
                joint_graph,
                "lazy_init",
                lambda input_device=None, *a, **k: original_lazy_init(torch.device("cpu"), *a, **k),
            )
        )
        from torch._inductor import utils as inductor_utils
        from torch._inductor.fx_passes import pad_mm

        stack.enter_context(mock.patch.object(inductor_utils, "get_device_tflops",
                                              lambda dtype: _peak_tflops(arch, dtype)))
        stack.enter_context(mock.patch.object(pad_mm, "_should_pad", _should_pad_by_rule))
        DeviceProperties.create.cache_clear()
        drivers = triton.runtime.driver
        previous = drivers._active
        drivers.set_active(_VirtualTritonDriver(arch, props))
        try:
            yield
        finally:
            drivers._active = previous
            DeviceProperties.create.cache_clear()


# --- export -------------------------------------------------------------------


def _fake_cuda_module(module: torch.nn.Module, fake_mode) -> tuple[torch.nn.Module, list]:
    """A copy of ``module`` whose parameters and buffers are fake CUDA tensors, and the
    references to them that plain Python objects of its modules hold (see ``_aliases``)."""
    clone = copy.deepcopy(module)
    owners = {}  # id of a parameter or buffer -> (its module, its name)
    with fake_mode:
        for mod in clone.modules():
            for key, p in list(mod._parameters.items()):
                if p is not None:
                    owners.setdefault(id(p), (mod, key))
                    mod._parameters[key] = torch.nn.Parameter(_fake_like(p), requires_grad=False)
            for key, b in list(mod._buffers.items()):
                if b is not None:
                    owners.setdefault(id(b), (mod, key))
                    mod._buffers[key] = _fake_like(b)
            for key, value in list(vars(mod).items()):
                if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                    setattr(mod, key, _fake_like(value))
    aliases, seen = [], set()
    for mod in clone.modules():
        for key, value in vars(mod).items():
            if not key.startswith("_"):
                _aliases(value, owners, aliases, seen)
    return clone, aliases


def _aliases(value, owners: dict, found: list, seen: set) -> None:
    """The references to a module's parameters and buffers inside plain Python objects
    (attributes, lists, dicts), as ``(container, slot, module, name)`` into ``found``.

    transformers' ``TorchExportableModuleWithStaticCache`` registers its ``StaticCache``'s
    tensors as its buffers, and the cache's layers update them in forward through their
    own references. Non-strict ``torch.export`` traces forward with the modules' buffers
    swapped for its own tensors; a reference elsewhere would still be the original, a
    constant whose updates are lost. ``_bind_aliases`` points them at the buffers for the
    trace. A CPU device such an object records (where its tensors were) becomes the GPU's."""
    if id(value) in seen or isinstance(value, (torch.nn.Module, torch.Tensor, type, types.ModuleType,
                                               types.FunctionType, types.MethodType, str, bytes, int, float)):
        return
    seen.add(id(value))
    if isinstance(value, list):
        items = list(enumerate(value))
    elif isinstance(value, dict):
        items = list(value.items())
    elif isinstance(getattr(value, "__dict__", None), dict):
        items = list(vars(value).items())
    else:
        return
    for slot, item in items:
        if isinstance(item, torch.Tensor) and id(item) in owners:
            found.append((value, slot, *owners[id(item)]))
        elif isinstance(item, torch.device) and item.type == "cpu":
            _set(value, slot, torch.device("cuda"))
        else:
            _aliases(item, owners, found, seen)


def _get(container, slot):
    return container[slot] if isinstance(container, (list, dict)) else getattr(container, slot)


def _set(container, slot, value) -> None:
    if isinstance(container, (list, dict)):
        container[slot] = value
    else:
        setattr(container, slot, value)


def _bind_aliases(module: torch.nn.Module, aliases: list) -> None:
    """Have ``module``'s forward point each alias (``_aliases``) at its module's parameter
    or buffer as it is then (export's tensor for it), and back after."""
    if not aliases:
        return
    forward = module.forward

    def bound(*args, **kwargs):
        before = [_get(container, slot) for container, slot, _, _ in aliases]
        for container, slot, mod, name in aliases:
            _set(container, slot, getattr(mod, name))
        try:
            return forward(*args, **kwargs)
        finally:
            for (container, slot, _, _), value in zip(aliases, before):
                _set(container, slot, value)

    module.forward = functools.wraps(forward)(bound)


def _fake_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")


def _attention_for(arch: int):
    """``F.scaled_dot_product_attention`` with its kernel chosen at build time.

    On CUDA tensors the real function asks the device, from C++, which fused
    kernel to run; a virtual GPU cannot answer. We make the same choice from
    the arch: FlashAttention for fp16/bf16 without a mask (sm_80+, head dim a
    multiple of 8 up to 256), memory-efficient attention otherwise, and the
    math decomposition when neither applies.
    """
    aten = torch.ops.aten

    def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if dropout_p != 0.0:
            raise UnsupportedModelError(
                "scaled_dot_product_attention with dropout_p > 0 is training-only",
                fix="pass dropout_p=0.0 (or self.training and p or 0.0) in the model",
            )
        head_dim = q.shape[-1]
        fused_ok = (
            q.dim() == 4
            and not enable_gqa
            and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and k.shape[-1] == head_dim == v.shape[-1]
            and head_dim % 8 == 0
        )
        if fused_ok and attn_mask is None and q.dtype in (torch.float16, torch.bfloat16) and arch >= 80 and head_dim <= 256:
            return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False, scale=scale)[0]
        if fused_ok and head_dim <= 512:
            return aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, False, 0.0, is_causal, scale=scale)[0]
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            # The private op adds its mask: a boolean one becomes 0 where True, -inf where False
            # first, as the public function does (Falcon's one key/value head under a padding mask).
            attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(q.dtype)
        return aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa
        )[0]

    return attention


def _export(module, example_inputs, fake_mode, arch, dynamic: Dynamic | None = None):
    """``torch.export`` on fake CUDA tensors; ``dynamic`` makes dim 0 of its batched inputs
    one symbolic size."""
    fake_module, aliases = _fake_cuda_module(module, fake_mode)
    with fake_mode:
        fake_inputs = tuple(_fake_like(t) for t in example_inputs)
        dynamic_shapes = None
        if dynamic is not None:  # by tensor, whatever forward's signature (*args included)
            batch = torch.export.Dim(BATCH, min=dynamic.min, max=dynamic.max)
            shapes = torch.export.ShapesCollection()
            for i in dynamic.batched_inputs:
                shapes[fake_inputs[i]] = {0: batch}
            dynamic_shapes = shapes.dynamic_shapes(fake_module, fake_inputs)
        changed = _watch_python_state(fake_module)
        _bind_aliases(fake_module, aliases)
        with torch.no_grad(), mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", _attention_for(arch)):
            ep = torch.export.export(fake_module, fake_inputs, dynamic_shapes=dynamic_shapes, strict=False)
    if changed:
        raise changed[0]
    return ep


def _loose_tensors(module: torch.nn.Module) -> list[str]:
    """Tensor attributes that are neither parameters nor buffers (export lifts them as constants)."""
    return [f"{path}.{key}" if path else key for path, mod in module.named_modules()
            for key, value in vars(mod).items() if isinstance(value, torch.Tensor)]


def _watch_python_state(module: torch.nn.Module) -> list:
    """Have ``module``'s forward note, as it is traced, a Python attribute it changed (export
    puts them back after): returns the list the error lands in."""
    forward, changed = module.forward, []

    def watched(*args, **kwargs):
        before = _python_state(module)
        out = forward(*args, **kwargs)
        try:
            _reject_python_state_changes(module, before)
        except UnsupportedModelError as exc:
            changed.append(exc)
        return out

    module.forward = functools.wraps(forward)(watched)
    return changed


def _python_state(module: torch.nn.Module) -> dict:
    """The plain Python values (numbers, strings) a model's modules hold as attributes."""
    return {(path, key): value for path, mod in module.named_modules() for key, value in vars(mod).items()
            if not key.startswith("_") and isinstance(value, (bool, int, float, str))}


def _reject_python_state_changes(module: torch.nn.Module, before: dict) -> None:
    """A forward that changes a Python attribute (a step counter) would be replayed with the
    value it had when traced, every call: a build error naming it and the line."""
    for (path, key), value in _python_state(module).items():
        if (path, key) in before and before[path, key] != value:
            mod = module.get_submodule(path)
            name = f"{path}.{key}" if path else key
            raise UnsupportedModelError(
                f"forward changes the Python attribute {name} ({before[path, key]!r} -> {value!r})"
                f"{_assignment_where(type(mod), key)}: a package replays one trace, in which it keeps the value it had "
                "when traced",
                fix=f"keep {key} in a registered buffer (self.register_buffer) updated with tensor ops, or pass it "
                "in as an input (as input_pos is in an LLM decode step)",
            )


def _assignment_where(cls: type, key: str) -> str:
    """`` at model.py:12 (`self.step += 1`)``: the first line of ``cls.forward`` assigning ``self.key``."""
    import inspect

    try:
        lines, first = inspect.getsourcelines(cls.forward)
        filename = inspect.getsourcefile(cls.forward) or "?"
    except (OSError, TypeError):
        return ""
    pattern = re.compile(rf"\bself\.{re.escape(key)}\s*([-+*/%|&^]|//|\*\*|<<|>>)?=(?!=)")
    for offset, line in enumerate(lines):
        if pattern.search(line):
            return f" at {filename.rsplit('/', 1)[-1]}:{first + offset} (`{line.strip()}`)"
    return ""


# --- capture ------------------------------------------------------------------


def launch_marker(kernel_name: str, *args) -> None:
    """Stands in the FX graph for a Triton kernel launch (FX's metadata hook
    calls it on fake tensors; it does nothing)."""


class _Captured(Exception):
    def __init__(self, gm, kernels):
        super().__init__("captured")
        self.gm = gm
        self.kernels = kernels


_HEURISTIC = re.compile(r"@triton_heuristics\.(\w+)\(")
_REDUCTION_HINT = re.compile(r"reduction_hint=ReductionHint\.(\w+)")
_JIT = re.compile(r"^@triton\.jit\s*$", re.M)


def _make_converter_class():
    from torch._inductor.codegen.wrapper_fxir import FxConverter

    class RecordingConverter(FxConverter):
        """Inductor's FX converter, with Triton kernels recorded instead of compiled."""

        def __post_init__(self):
            super().__post_init__()
            self.kernel_sources: dict[str, str] = {}
            self.aot_kernels: dict[str, g.Kernel] = {}

        def _generate_kernel_definition(self, line) -> None:
            self.kernel_sources[line.kernel_name] = line.kernel_body

        def _generate_triton_call(self, line) -> None:
            name = line.kernel_name
            if name not in self.aot_kernels:
                self.aot_kernels[name] = _kernel_from_call(name, self.kernel_sources[name], line)
            self.gm.graph.call_function(launch_marker, args=(name, *map(self._call_arg, line.call_args)))

        def _call_arg(self, arg):
            """A launch argument as FX sees it: a buffer's node, an int, or (a size that
            depends on the dynamic batch) the node computing it."""
            import sympy
            from torch._inductor.codegen.wrapper import SymbolicCallArg

            if isinstance(arg, SymbolicCallArg):
                arg = arg.inner_expr
            if _is_int_expr(arg):
                return int(arg)
            if isinstance(arg, sympy.Expr):
                return self._generate_sym_node(arg)
            if isinstance(arg, str):
                return self.buffer_to_node[arg]
            return arg

    return RecordingConverter


def _is_int_expr(value) -> bool:
    import sympy

    return isinstance(value, sympy.Integer)


def _size_bound(arg) -> tuple[int, bool]:
    """(value, dynamic) of a size passed to a kernel: its value, or, when it depends on the
    dynamic batch, its upper bound over the batch range."""
    from torch._inductor.codegen.wrapper import SymbolicCallArg
    from torch._inductor.virtualized import V
    from torch.utils._sympy.value_ranges import bound_sympy

    if isinstance(arg, SymbolicCallArg):
        arg = arg.inner_expr
    if _is_int_expr(arg) or isinstance(arg, int):
        return int(arg), False
    upper = bound_sympy(arg, V.graph.sizevars.shape_env.var_to_range).upper
    return int(upper), True


def _kernel_from_call(name: str, body: str, line) -> g.Kernel:
    heuristic = _HEURISTIC.search(body)
    jit = _JIT.search(body)
    if heuristic is None or jit is None:
        raise UnsupportedModelError(
            f"Inductor emitted kernel {name} in a form aotcombo does not read "
            "(no @triton_heuristics decorator): templates such as max-autotune "
            "matmuls are not supported."
        )
    meta = line.triton_meta
    signature = tuple(meta["signature"].items())
    if len(line.call_args) > len(signature):
        raise UnsupportedModelError(
            f"kernel {name}: {len(line.call_args)} call arguments for {len(signature)} parameters"
        )
    # Call arguments fill the signature from the start: numels, constants and
    # all; the block sizes that autotuning would set come last and are ours.
    numels, dynamic = [], []
    for (p, _), a in zip(signature, line.call_args):
        if p.endswith("numel"):
            value, is_dynamic = _size_bound(a)
            numels.append((p[: -len("numel")], value))
            if is_dynamic:
                dynamic.append(p[: -len("numel")])
    divisible = set()
    for cfg in meta.get("configs", []):
        for idx, attrs in cfg.items():
            if any(a[0] == "tt.divisibility" for a in attrs):
                divisible.add(signature[idx[0]][0])
    hint = _REDUCTION_HINT.search(body)
    inductor_meta = line.inductor_meta or {}
    # Keep the jit functions (the kernel and any scan/sort helpers before it);
    # drop the autotuning decorator and the wrapper's quoting around them.
    after_decorator = _JIT.search(body, heuristic.start())
    body = body[: heuristic.start()] + body[after_decorator.start():]
    jit = _JIT.search(body)
    return g.Kernel(
        name=name,
        source=body[jit.start(): body.rindex("'''")].rstrip() + "\n",
        heuristic=heuristic.group(1),
        signature=signature,
        constants=tuple(sorted(meta.get("constants", {}).items())),
        divisible_by_16=tuple(p for p, _ in signature if p in divisible),
        numels=tuple(numels),
        dynamic_numels=tuple(dynamic),
        reduction_hint=hint.group(1) if hint else None,
        # Workspaces (a mixed-order reduction's partial results) and semaphores are written
        # by the kernel without being named as mutated.
        mutated=tuple(dict.fromkeys([*inductor_meta.get("mutated_arg_names", ()),
                                     *(p for p, _ in signature if p in ("ws_ptr", "sem_ptr"))])),
        no_x_dim=bool(inductor_meta.get("no_x_dim")),
        rsplit_size=int(inductor_meta["RSPLIT_SIZE"]) if inductor_meta.get("RSPLIT_SIZE") else None,
    )


_DEVICE_COPY = re.compile(r"^(\w+)\.copy_\((\w+)(?:, (?:True|False))?\)$")
# A mixed-order reduction's last step, which Inductor writes as text: the kernel leaves one
# partial result per split of the rows in a float32 workspace, and the wrapper reduces them,
#   buf1 = workspace_0[0 * (n) * (r) : (0 + 1) * (n) * (r)].view(n, r).sum(dim=0).view([r]).to(torch.bfloat16)
# (``SIMDScheduling._codegen_mix_order_reduction``; the ``.view``/``.to`` tails are optional).
_MIX_ORDER_FINAL = re.compile(
    r"^(?P<out>\w+) = (?P<ws>\w+)\[(?P<start>[^\[\]]+?) : (?P<end>[^\[\]]+?)\]"
    r"\.view\((?P<nsplit>[^,]+), (?P<rnumel>[^,]+)\)\.(?P<op>sum|amax|amin|prod)\(dim=0\)"
    r"(?:\.view\(\[(?P<shape>[^\]]*)\]\))?(?:\.to\(torch\.(?P<dtype>\w+)\))?$"
)
# reduction -> (public aten overload, its dim argument); Inductor mixes orders for sum and prod.
_MIX_ORDER_OPS = {"sum": ("sum.dim_IntList", [0]), "prod": ("prod.dim_int", 0),
                  "amax": ("amax.default", [0]), "amin": ("amin.default", [0])}


def _size_expr(text: str, symbols: dict):
    """A size the wrapper wrote as Python text (``(0 + 1) * (64) * (s0 // 2)``) as a sympy
    expression over the graph's size symbols; only integers, names, + - * and //."""
    import ast

    import sympy
    from torch.utils._sympy.functions import FloorDiv

    def convert(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return sympy.Integer(node.value)
        if isinstance(node, ast.Name) and node.id in symbols:
            return symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -convert(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = convert(node.left), convert(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.FloorDiv):
                return FloorDiv(a, b)
        raise ValueError(f"cannot read the size {text!r}")

    return convert(ast.parse(text.strip(), mode="eval").body)


def _structured_lines(lines):
    """The wrapper writes a few steps as plain text, which its FX converter rejects; give
    them line types it can read: device copies (a lifted constant moved to the GPU) and
    the final step of a mixed-order reduction (see ``_MIX_ORDER_FINAL``); comments are
    dropped. Any other text line fails the build, naming the line."""
    from torch._inductor.codegen.wrapper import WrapperLine

    class CopyLine(WrapperLine):
        def __init__(self, dst: str, src: str):
            self.dst, self.src = dst, src

        def codegen_fx(self, converter):
            def emit(line):
                nodes = converter.buffer_to_node
                converter.gm.graph.call_function(torch.ops.aten.copy_.default, args=(nodes[line.dst], nodes[line.src]))

            return emit

    class MixOrderFinalLine(WrapperLine):
        """``out = reduce(workspace[start:end].view(nsplit, rnumel), dim=0)``, then the
        buffer's shape and dtype: an as_strided view, a public aten reduction, a view and a
        dtype conversion in the FX graph."""

        def __init__(self, text: str, match: re.Match):
            self.text, self.parts = text, match.groupdict()

        def codegen_fx(self, converter):
            def emit(line):
                aten = torch.ops.aten
                parts = line.parts
                symbols = {str(s): s for s in converter.expr_to_proxy if getattr(s, "is_Symbol", False)}
                try:
                    size = {k: _size_expr(parts[k], symbols) for k in ("start", "nsplit", "rnumel")}
                    shape = [_size_expr(d, symbols) for d in parts["shape"].split(",")] if parts["shape"] else None
                except (ValueError, SyntaxError) as exc:
                    raise UnsupportedModelError(
                        f"cannot package Inductor's mixed-order reduction step `{line.text}`: {exc}") from None
                sym = converter._generate_sym_node
                graph = converter.gm.graph
                out = parts["out"]
                partials = graph.call_function(
                    torch.as_strided,
                    args=(converter.buffer_to_node[parts["ws"]], [sym(size["nsplit"]), sym(size["rnumel"])],
                          [sym(size["rnumel"]), 1], sym(size["start"])),
                )
                partials.name = f"{out}_partials"
                overload, dim = _MIX_ORDER_OPS[parts["op"]]
                name, overload = overload.split(".")
                node = graph.call_function(getattr(getattr(aten, name), overload), args=(partials, dim))
                node.name = f"{out}_{parts['op']}"
                if shape is not None:  # the reduced buffer is contiguous, like the reduction's result
                    strides, running = [], 1
                    for d in reversed(shape):
                        strides.append(running)
                        running = running * d
                    node = graph.call_function(
                        torch.as_strided, args=(node, [sym(d) for d in shape], [sym(s) for s in reversed(strides)], 0))
                    node.name = f"{out}_view"
                if parts["dtype"]:
                    node = graph.call_function(aten.to.dtype, args=(node, getattr(torch, parts["dtype"])))
                node.name = out
                converter.buffer_to_node[out] = node

            return emit

    out = []
    for line in lines:
        if isinstance(line, str):
            text = line.strip()
            if match := _DEVICE_COPY.match(text):
                line = CopyLine(match.group(1), match.group(2))
            elif match := _MIX_ORDER_FINAL.match(text):
                line = MixOrderFinalLine(text, match)
            elif not text or text.startswith("#"):
                continue
            else:
                raise UnsupportedModelError(
                    f"Inductor's wrapper code has a step aotcombo cannot package: `{text[:300]}`",
                    fix="report it with the model; meanwhile change the construct that makes it",
                )
        out.append(line)
    return out


def _install_capture():
    from torch._inductor.codegen import wrapper_fxir

    converter_cls = _make_converter_class()

    def generate(self, is_inference):
        self.run_wrapper_ir_passes(is_inference)
        converter = converter_cls(
            lines=_structured_lines(self.lines),
            prologue="",
            graph_inputs=self.get_fx_graph_inputs(),
            graph_outputs=self.get_graph_outputs(),
            subgms=self.subgms,
            is_subgraph=self.is_subgraph,
        )
        gm = converter.generate()
        raise _Captured(gm, converter.aot_kernels)

    return mock.patch.object(wrapper_fxir.WrapperFxCodegen, "_generate", generate)


def _inductor_config(combo_kernels: bool = False, dynamic: bool = False):
    from torch._inductor import config

    return config.patch(
        {
            # A mixed-order reduction splits its rows by a size fixed at build time (the
            # workspace is sized for it): with a dynamic batch, reduce each order apart.
            "triton.mix_order_reduction": not dynamic,
            "fx_wrapper": True,
            "allow_buffer_reuse": False,  # reuse would add false dependencies between kernels
            "force_disable_caches": True,
            "combo_kernels": combo_kernels,  # aotcombo makes its own; True only to compare with Inductor's
            "max_autotune": False,
            "max_autotune_gemm": False,
            "max_autotune_pointwise": False,
            "coordinate_descent_tuning": False,
            "freezing": False,
            "compile_threads": 1,
            "triton.cudagraphs": False,
            "triton.autotune_at_compile_time": False,
            "joint_graph_constant_folding": False,  # it evaluates constants on the (virtual) device
            "shape_padding": True,  # by rule, not by timing (_should_pad_by_rule)
            "size_asserts": False,
            "alignment_asserts": False,
        }
    )


def _note_failing_node():
    """Inductor's errors from lowering one node do not always say which: note the node on
    the exception (as ``_aotcombo_node``; its type is kept, for whoever catches it)."""
    from torch._inductor.graph import GraphLowering

    original = GraphLowering.run_node

    def run_node(self, n):
        try:
            return original(self, n)
        except Exception as exc:
            if n.op == "call_function" and not hasattr(exc, "_aotcombo_node"):
                try:
                    exc._aotcombo_node = n
                except AttributeError:  # an exception type without __dict__
                    pass
            raise

    return mock.patch.object(GraphLowering, "run_node", run_node)


def _run_inductor(gm, fake_inputs, combo_kernels: bool = False, dynamic: bool = False):
    from torch._inductor.compile_fx import compile_fx

    import logging
    import tempfile

    # Inductor logs a warning when our capture unwinds its cache context;
    # its scratch files go to a folder of ours that is removed afterwards.
    quiet = mock.patch.object(logging.getLogger("torch._inductor.utils"), "level", logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="aotcombo-inductor-") as cache, quiet, mock.patch.dict(
            "os.environ", {"TORCHINDUCTOR_CACHE_DIR": cache}
        ), _inductor_config(combo_kernels, dynamic), _install_capture(), _note_failing_node():
            compile_fx(gm, fake_inputs)
    except BaseException as exc:  # noqa: BLE001 - we look for our marker in the chain
        seen = exc
        while seen is not None:
            if isinstance(seen, _Captured):
                return seen.gm, seen.kernels
            if isinstance(seen, UnsupportedModelError):
                raise seen from None
            seen = seen.__cause__ or seen.__context__
        raise
    raise UnsupportedModelError("Inductor finished without producing a wrapper to capture")


# --- FX wrapper graph -> aotcombo graph ---------------------------------------------


def _size(value) -> int | str:
    """A size of a traced tensor: an int, ``BATCH`` for the dynamic batch itself, or the
    text of an expression of it in ``BATCH`` (``"64*batch"``: the runtime evaluates it)."""
    if isinstance(value, int):
        return value
    expr = value.node.expr
    if expr.is_number:
        return int(expr)
    if expr.is_symbol:
        return BATCH
    return str(expr.subs({s: sympy.Symbol(BATCH) for s in expr.free_symbols}))


def _spec(t: torch.Tensor) -> g.TensorSpec:
    return g.TensorSpec(
        shape=tuple(_size(s) for s in t.shape),
        stride=tuple(_size(s) for s in t.stride()),
        dtype=str(t.dtype).removeprefix("torch."),
        storage_offset=_size(t.storage_offset()),
    )


def _traced_spec(t: torch.Tensor, shape, stride, offset=0) -> g.TensorSpec:
    """The spec of an allocation or view from its call's arguments: ints, or ``Ref``s to
    the ``Scalar``s computing sizes that depend on the dynamic batch."""
    return g.TensorSpec(shape=tuple(_to_plain(list(shape))), stride=tuple(_to_plain(list(stride))),
                        dtype=str(t.dtype).removeprefix("torch."), storage_offset=_to_plain(offset))


_SCALAR_FUNCTIONS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.floordiv: "floordiv",
    operator.mod: "mod", operator.neg: "neg", torch.sym_max: "max", torch.sym_min: "min", torch.sym_sum: "sum",
}


def _scalar(node) -> g.Scalar | None:
    """The ``Scalar`` a wrapper node computes (a size of the dynamic batch), or None."""
    if node.target is torch.ops.aten.sym_size.int:
        return g.Scalar(node.name, "size", (g.Ref(node.args[0].name), int(node.args[1])))
    fn = _SCALAR_FUNCTIONS.get(node.target)
    if fn is None:
        if isinstance(node.meta.get("val"), torch.SymInt) or node.target in (torch.sym_float, torch.sym_not):
            raise UnsupportedModelError(f"the compiled program computes a size with "
                                        f"{getattr(node.target, '__name__', node.target)}, which aotcombo cannot package",
                                        fix="build with --batch buckets instead of --dynamic")
        return None
    args = node.args[0] if fn == "sum" else node.args
    return g.Scalar(node.name, fn, tuple(_to_plain(a) for a in args))


def _to_plain(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        return g.Ref(value.name)
    if isinstance(value, list):  # FX's immutable_list too: plain data only
        return [_to_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_to_plain(v) for v in value)
    if isinstance(value, torch.dtype):
        return g.Const("dtype", str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return g.Const("device", value.type)
    if isinstance(value, torch.layout):
        return g.Const("layout", str(value).removeprefix("torch."))
    if isinstance(value, torch.memory_format):
        return g.Const("memory_format", str(value).removeprefix("torch."))
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _is_int_expr(value):
        return int(value)
    raise UnsupportedModelError(f"cannot package argument {value!r} of type {type(value).__name__}")


def _op_name(op: torch._ops.OpOverload) -> str:
    return f"{op._schema.name}.{op._overloadname}"


def _written_args(op: torch._ops.OpOverload, args, kwargs) -> list[str]:
    written = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
        written += g.refs_in(_to_plain(value))
    return written


def _aliased_args(op: torch._ops.OpOverload, args, kwargs) -> list[str]:
    """Inputs whose storage the op's result shares (views, in-place ops)."""
    returned = {a for r in op._schema.returns if r.alias_info for a in r.alias_info.before_set}
    aliased = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is None or not (set(arg.alias_info.before_set) & returned):
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
        aliased += g.refs_in(_to_plain(value))
    return aliased


ATTENTION = "aten::scaled_dot_product_attention"  # public; the program calls it through runtime/ops.py
_PRIVATE_ATTENTION = frozenset({
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
})


def _attention(node) -> g.Extern | None:
    """A private fused-attention op as the public call that makes it (``runtime.ops.attention``),
    or None for any other node. Only its first output may be used: the others (log-sum-exp,
    RNG state) are for training."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or op._schema.name.removeprefix("aten::") not in _PRIVATE_ATTENTION:
        return None
    names = [a.name for a in op._schema.arguments]
    bound = {**dict(zip(names, node.args)), **node.kwargs}
    where = _node_where(node)
    if bound.get("dropout_p", 0.0) not in (0, 0.0):
        raise UnsupportedModelError(f"{op._schema.name}{where} uses dropout, which is training-only",
                                    fix="pass dropout_p=0.0 in the model")
    for user in node.users:
        if user.target is not operator.getitem or user.args[1] != 0:
            raise UnsupportedModelError(f"{op._schema.name}{where}: the program uses an output other than the "
                                        "attention itself (log-sum-exp or RNG state)", fix="use only its result")
    out, query = node.meta["val"][0], bound["query"].meta["val"]
    b, h, m, k = (d.node.expr if isinstance(d, torch.SymInt) else d for d in out.shape)
    strides = tuple(s.node.expr if isinstance(s, torch.SymInt) else s for s in out.stride())
    layouts = {"bmhk": (m * h * k, k, h * k, 1), "contiguous": (h * m * k, m * k, k, 1)}
    layout = next((name for name, expected in layouts.items()
                   if all(n == 1 or s == e for n, s, e in zip((b, h, m, k), strides, expected))), None)
    if layout is None or tuple(out.shape) != tuple(query.shape[:-1]) + (out.shape[-1],):
        raise UnsupportedModelError(f"{op._schema.name}{where} returns a layout aotcombo does not know "
                                    f"(shape {tuple(out.shape)}, strides {tuple(out.stride())})")
    kwargs = {"layout": layout, "attn_mask": bound.get("attn_bias"),
              "is_causal": bool(bound.get("is_causal", False)), "scale": bound.get("scale")}
    return g.Extern(op=ATTENTION, args=_to_plain((bound["query"], bound["key"], bound["value"])),
                    kwargs=tuple((key, _to_plain(value)) for key, value in kwargs.items()),
                    out=node.name, writes=(), aliases=())


# Names the package's program defines itself (templates/program.py.j2): a value of the
# same name would shadow them.
_PROGRAM_NAMES = frozenset({"torch", "empty_strided", "as_strided", "aten", "kernels", "weights", "device", "forward"})


def _graph_from_fx(gm, kernels, input_meta, arch) -> g.Graph:
    for node in gm.graph.nodes:
        if node.name in _PROGRAM_NAMES:
            node._rename(f"{node.name}_value")
    ops: list[g.Op] = []
    inputs: list[g.Input] = []
    specs: dict[str, g.TensorSpec] = {}
    outputs: tuple = ()
    placeholders = iter(input_meta)
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            specs[node.name] = _spec(val)
        if node.op == "placeholder":
            kind, key = next(placeholders)
            inputs.append(g.Input(node.name, specs[node.name], kind, key))
        elif node.op == "output":
            result = node.args[0]
            result = result if isinstance(result, (list, tuple)) else [result]
            outputs = tuple(r.name if r is not None else None for r in result)
        elif node.op != "call_function":
            raise UnsupportedModelError(f"unexpected wrapper node {node.format_node()}")
        elif node.target is launch_marker:
            ops.append(g.Launch(node.args[0], tuple(_to_plain(a) for a in node.args[1:])))
        elif node.target is torch.empty_strided:
            ops.append(g.Alloc(node.name, _traced_spec(val, *node.args)))
        elif node.target is torch.as_strided:
            ops.append(g.View(node.name, node.args[0].name, _traced_spec(val, *node.args[1:])))
        elif (scalar := _scalar(node)) is not None:
            ops.append(scalar)
        elif node.target is operator.getitem:
            ops.append(g.GetItem(node.name, node.args[0].name, int(node.args[1])))
        elif (attention := _attention(node)) is not None:
            ops.append(attention)
        elif isinstance(node.target, torch._ops.OpOverload):
            op = node.target
            try:
                args = _to_plain(tuple(node.args))
                kwargs = tuple((k, _to_plain(v)) for k, v in node.kwargs.items())
            except UnsupportedModelError as exc:
                raise UnsupportedModelError(f"{exc.message}, passed to {_target_name(op)}", exc.fix) from None
            ops.append(
                g.Extern(
                    op=_op_name(op),
                    args=args,
                    kwargs=kwargs,
                    out=node.name if node.users or not op._schema.returns == [] else None,
                    writes=tuple(_written_args(op, node.args, node.kwargs)),
                    aliases=tuple(_aliased_args(op, node.args, node.kwargs)),
                )
            )
        else:
            raise UnsupportedModelError(
                f"the compiled program calls {getattr(node.target, '__name__', node.target)!r}, "
                "which aotcombo cannot package"
            )
    return g.Graph(
        arch=arch,
        inputs=tuple(inputs),
        ops=tuple(ops),
        kernels=tuple(kernels.values()),
        outputs=outputs,
        specs=tuple(specs.items()),
    )


# --- entry point -------------------------------------------------------------------


def trace(module: torch.nn.Module, example_inputs: tuple, arch: int, *, inductor_combo_kernels: bool = False,
          dynamic: Dynamic | None = None):
    """Trace ``module`` for a GPU of compute capability ``arch`` (e.g. 90).

    ``dynamic``: dim 0 of its batched inputs is one symbolic batch size in [min, max]; kernels then take the sizes that depend on it as arguments.

    ``inductor_combo_kernels=True`` lets Inductor make its own combo kernels:
    only to count the launches ``torch.compile`` would make, for comparison.

    Returns ``(graph, weights, structure)``: the plain-data graph, the real
    tensors of every weight input by name, and the nesting of the model's
    outputs (see ``output_structure``).
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.export.graph_signature import InputKind, OutputKind

    with virtual_gpu(arch), _quiet_logs():
        fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        try:
            ep = _export(module, example_inputs, fake_mode, arch, dynamic)
        except UnsupportedModelError as exc:  # ours, raised while tracing (attention): add the model's line
            raise _located(exc, where(exc)) from None
        except Exception as exc:  # noqa: BLE001 - every export failure is the model's
            loose = _loose_tensors(module)
            experts = _token_picking_experts(module)
            cache = _growing_cache(module, exc)
            raise UnsupportedModelError(
                f"torch.export cannot trace the model{where(exc) or library_where(exc)}: {_summary(exc)}",
                fix=(f"the model's MoE experts ({experts}) run transformers' experts_implementation=\"eager\", "
                     "which picks each expert's tokens (nonzero, a loop over the experts hit: data-dependent "
                     "shapes); build it with model.set_experts_implementation(\"grouped_mm\") or \"batched_mm\" "
                     "(or experts_implementation=... in from_pretrained or the config): fixed shapes" if experts else
                     f"{cache} makes a transformers cache of past keys and values (its config has use_cache=True), "
                     "which grows with every call and comes back as an output: build it with use_cache=False "
                     "(model.config.use_cache = False before get_model returns it); to serve decoding, give it a "
                     "StaticCache and cache_position (README: An LLM decode loop)" if cache else
                     "aotcombo needs a model torch.export can capture whole: no data-dependent Python control "
                     "flow, no .item()/.tolist() host syncs, only ops with CUDA and fake-tensor kernels")
                + (f"; the model holds tensors that are not registered buffers ({', '.join(loose[:5])}): if "
                   "forward updates one, register it with self.register_buffer" if loose else ""),
            ) from exc
        _reject_data_dependent_shapes(ep)
        # Functional ATen: in-place updates of inputs become extra outputs; fallbacks with a
        # plain formulation become ops Inductor writes kernels for (decompositions.py).
        # (Not when counting Inductor's own launches: torch.compile makes those fallbacks.)
        ep = ep.run_decompositions({} if inductor_combo_kernels else decompositions.table())
        _literals_on_the_gpu(ep)
        if not inductor_combo_kernels:
            linears.combine(ep, module)
            linears.fold_residuals(ep)
            if dynamic is None:  # its kernels are sized at build time
                fused_linears.fuse(ep)
        signature = ep.graph_signature
        _scatter_into_whole_buffers(ep)
        state = _write_state_in_place(ep)
        input_meta = []
        user_index = 0
        for spec in signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                input_meta.append(("user", user_index))
                user_index += 1
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                input_meta.append(("weight", spec.target))
            else:
                raise UnsupportedModelError(f"unsupported model input {spec.arg.name} ({spec.kind.name})")
        gm = ep.graph_module
        fake_inputs = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
        try:
            fx_wrapper, kernels = _run_inductor(gm, fake_inputs, inductor_combo_kernels, dynamic is not None)
        except UnsupportedModelError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _inductor_failure(exc, arch) from exc
        graph = _graph_from_fx(fx_wrapper, kernels, input_meta, arch)
        _refuse_other_libraries_ops(graph, gm)
        placeholder = {s.arg.name: i for i, s in enumerate(signature.input_specs)}
        mutations = tuple(
            (graph.inputs[placeholder[s.target]].name, i)
            for i, s in enumerate(signature.output_specs)
            if s.kind == OutputKind.USER_INPUT_MUTATION
        )
        graph = g.replace(graph, mutations=mutations, dynamic=dynamic, state=state)

    weights = {key: _real_tensor(module, key, ep.constants) for kind, key in input_meta if kind == "weight"}
    return graph, weights, output_structure(ep.call_spec.out_spec)


PACKAGED_NAMESPACES = ("aten", "aotcombo")  # torch's own ops; ours are lowered to kernels after the trace


def _refuse_other_libraries_ops(graph: g.Graph, exported: torch.fx.GraphModule) -> None:
    """Raise for a call the package would make to another library's custom op (transformers',
    torchvision's, a user's extension): a package runs with torch alone, where that op is not
    registered. Names the op and, from the exported graph, the model's line that calls it."""
    for op in graph.ops:
        namespace = op.op.partition("::")[0] if isinstance(op, g.Extern) else None
        if namespace is None or namespace in PACKAGED_NAMESPACES:
            continue
        node = next((n for n in exported.graph.nodes if isinstance(n.target, torch._ops.OpOverload)
                     and _op_name(n.target) == op.op), None)
        raise UnsupportedModelError(
            f"the model calls {op.op}{_node_where(node) if node is not None else ''}, a custom op that another "
            f"library registers (namespace {namespace!r}): a package runs with torch alone, without that library, "
            "so it cannot make that call",
            fix="compute it with torch ops in the model (a library's layer often has an implementation that does, "
            "chosen by its config), or leave that layer out of the model you build",
        )


def _token_picking_experts(module: torch.nn.Module) -> str:
    """The class of transformers' MoE experts modules (``@use_experts_implementation``) in
    ``module`` that run its "eager" implementation (tokens picked per expert: data-dependent
    shapes), or ""."""
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if hasattr(sub, "_is_expert_parallel") and hasattr(sub, "has_gate") and \
                getattr(config, "_experts_implementation", None) in ("eager", None):
            return type(sub).__name__
    return ""


def _growing_cache(module: torch.nn.Module, exc: BaseException) -> str:
    """The class of a transformers model in ``module`` whose config has ``use_cache`` on, when
    the export failed making or returning one of transformers' caches (a DynamicCache: made
    lazily, grown by every call), or ""."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    in_cache = any("transformers" in f.filename and f.filename.endswith("cache_utils.py") for f in frames)
    if not in_cache and not re.search(r"transformers\.cache_utils\.\w*Cache", str(exc)):
        return ""
    for sub in module.modules():
        if getattr(getattr(sub, "config", None), "use_cache", False):
            return type(sub).__name__
    return ""


def _inductor_failure(exc: BaseException, arch: int) -> UnsupportedModelError:
    """The build error for an Inductor failure: the op and the model's line when Inductor
    failed lowering one node, else the stage that failed; never an empty message."""
    failed = exc
    while failed is not None and not hasattr(failed, "_aotcombo_node"):
        failed = failed.__cause__ or failed.__context__
    if failed is not None:
        node = failed._aotcombo_node
        op = _target_name(node.target)
        return UnsupportedModelError(
            f"TorchInductor cannot compile {op}{_node_where(node) or where(exc)} for sm_{arch}: {_summary(failed)}",
            fix=f"replace {op} in the model (or compute it another way), or build for another arch",
        )
    return UnsupportedModelError(
        f"TorchInductor cannot generate code for the model for sm_{arch}{where(exc)} "
        f"(after lowering every op, while scheduling or writing the wrapper): {_summary(exc)}",
        fix="this is a gap in aotcombo's support of Inductor: report it with the model; "
        "building for another arch or changing the construct named in the error may avoid it",
    )


def _target_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._schema.name.split('::')[-1]}.{target._overloadname}" \
            if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def _node_where(node) -> str:
    """`` at model.py:12 (`code`)`` from an FX node's stack trace (its innermost frame)."""
    lines = (node.meta.get("stack_trace") or "").strip().splitlines()
    where = ""
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+)', line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File ") else ""
            where = f" at {m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}" + (f" (`{code}`)" if code else "")
    return where


def _located(exc: UnsupportedModelError, where: str) -> UnsupportedModelError:
    """``exc`` with `` at model.py:12 (`code`)`` appended, unless it names a place already."""
    if not where or " at " in exc.message:
        return exc
    located = type(exc)(f"{exc.message}{where}", exc.fix)
    located.detail = exc.detail
    return located


def _literals_on_the_gpu(ep) -> None:
    """Move tensor literals ``forward`` makes on the CPU, and what is computed from them alone,
    to the GPU.

    ``torch.log(torch.tensor(8.0))`` or ``torch.tensor(3.0) * 2`` (DeBERTa's relative
    positions and attention scale) are 0-dim CPU tensors that eager combines with GPU
    tensors; export lifts each literal as a constant input, and Inductor would compute on
    them with CPU kernels, which a package cannot hold. The package loads every constant
    onto the GPU anyway, so its placeholder, the ops computed only from such literals
    (their ``device`` arguments too) and their metadata checks move there; the values are
    the same, computed on the GPU. CPU tensors the model returns stay where they are."""
    from torch.export.graph_signature import InputKind

    graph = ep.graph
    literals = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.CONSTANT_TENSOR}
    moved: set = set()

    def on_cpu(node) -> bool:
        val = node.meta.get("val")
        return isinstance(val, torch.Tensor) and val.device.type == "cpu"

    for node in graph.nodes:
        if not on_cpu(node) or any(user.op == "output" for user in node.users):
            continue
        if node.op == "placeholder":
            if node.name in literals:
                moved.add(node)
            continue
        tensors = [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
        if node.op == "call_function" and tensors and all(a in moved for a in tensors):
            moved.add(node)
    if not moved:
        return
    gpu = torch.device("cuda", 0)
    for node in moved:
        val = node.meta["val"]
        with val.fake_mode:
            node.meta["val"] = val.to(gpu)
        if node.kwargs.get("device") is not None:
            node.kwargs = {**node.kwargs, "device": gpu}
        for user in list(node.users):
            if user.target is torch.ops.aten._assert_tensor_metadata.default:
                graph.erase_node(user)
    ep.graph_module.recompile()


def _scatter_into_whole_buffers(ep) -> None:
    """Rewrite an update of the first rows of a buffer as an update of the whole buffer.

    ``cache[:b].index_copy_(2, pos, k)`` or ``cache[:b, :, pos] = k`` (a KV cache with room
    for more sequences than this batch) is, in the functional graph,
    ``slice_scatter(cache, index_copy(cache[:b], 2, pos, k), 0, 0, b)``, which Inductor
    computes as a copy of ``cache[:b]``, the scatter, and a copy back. The same update is
    ``index_put(cache, [arange(b)[:, None, None], arange(h)[None, :, None], pos[None, None, :]], k)``,
    which Inductor writes in place, one small scatter kernel: that is what this pass makes."""
    aten = torch.ops.aten
    graph = ep.graph
    from torch.export.graph_signature import InputKind

    buffers = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.BUFFER}
    for scatter in list(graph.nodes):
        if scatter.target is not aten.slice_scatter.default or scatter.kwargs:
            continue
        base, update, *rest = scatter.args
        if base.op != "placeholder" or base.name not in buffers or tuple(rest[:2]) != (0, 0) or rest[3:] not in ([], [1]):
            continue
        end = rest[2] if len(rest) > 2 else None
        if update.target is aten.index_copy.default:
            rows, dim, index, values = update.args
            accumulate = False
        elif update.target is aten.index_put.default:
            rows, indices, values, *flags = update.args
            accumulate = bool(flags and flags[0])
            dim = len(indices) - 1
            if dim < 0 or any(i is not None for i in indices[:-1]) or indices[-1] is None:
                continue
            index = indices[-1]
        else:
            continue
        if (rows.target is not aten.slice.Tensor or rows.args[:3] != (base, 0, 0) or rows.args[3:] not in ([end], (end,))
                or len(update.users) != 1 or len(rows.users) != 1 or index.meta["val"].dim() != 1):
            continue
        sizes, device = base.meta["val"].shape, base.meta["val"].device
        with graph.inserting_before(scatter):
            whole = []
            for d in range(dim + 1):
                if d == dim:
                    axis = index
                else:
                    axis = graph.call_function(aten.arange.default, (end if d == 0 else sizes[d],),
                                               {"dtype": torch.int64, "device": device})
                whole.append(graph.call_function(aten.view.default,
                                                 (axis, [-1 if e == d else 1 for e in range(dim + 1)])))
            written = graph.call_function(aten.index_put.default, (base, whole, values, accumulate))
        written.meta.update(scatter.meta)
        scatter.replace_all_uses_with(written)
        for node in (scatter, update, rows):
            graph.erase_node(node)
    graph.lint()
    ep.graph_module.recompile()


def _write_state_in_place(ep) -> tuple[str, ...]:
    """Buffers that forward updates (a KV cache's ``index_copy_``) become the package's state:
    their new values, which the functional graph returns as extra outputs, are copied into
    the buffers at the end of the graph instead (``aten.copy_``), so that Inductor, as for
    ``torch.compile``'s inference graphs, writes them in place (a scatter into the cache,
    not a new cache and a copy). Returns the buffers' names. A model that writes a
    parameter, or a buffer through an update that cannot be replayed, fails the build
    naming it and the line."""
    from torch.export.graph_signature import OutputKind

    signature, graph = ep.graph_signature, ep.graph
    output = next(n for n in graph.nodes if n.op == "output")
    values = list(output.args[0])
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    buffer_inputs = {s.target: s.arg.name for s in signature.input_specs if s.target is not None}
    state, keep = [], []
    for spec, value in zip(signature.output_specs, values):
        if spec.kind == OutputKind.PARAMETER_MUTATION:
            raise UnsupportedModelError(
                f"the model writes its parameter {spec.target} in forward{_node_where(value)}",
                fix="parameters are read-only in a package: register the tensor as a buffer "
                "(self.register_buffer) if forward must update it, or return the new value",
            )
        if spec.kind == OutputKind.BUFFER_MUTATION:
            placeholder = placeholders[buffer_inputs[spec.target]]
            with graph.inserting_before(output):
                graph.call_function(torch.ops.aten.copy_.default, (placeholder, value))
            state.append(spec.target)
            continue
        if spec.kind not in (OutputKind.USER_OUTPUT, OutputKind.USER_INPUT_MUTATION):
            raise UnsupportedModelError(f"the model's output {spec.arg} is a {spec.kind.name}, which aotcombo "
                                        "cannot package")
        keep.append((spec, value))
    if state:
        output.args = (tuple(v for _, v in keep),)
        signature.output_specs = [spec for spec, _ in keep]
        graph.lint()
        ep.graph_module.recompile()
    return tuple(state)


def _reject_data_dependent_shapes(ep) -> None:
    """An op whose output size depends on data fails the build (a dynamic batch is fine)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for node in ep.graph.nodes:
        val = node.meta.get("val")
        values = val if isinstance(val, (list, tuple)) else [val]
        for v in values:
            if isinstance(v, torch.Tensor) and free_unbacked_symbols(v):
                where = _node_where(node)
                op = getattr(node.target, "__name__", str(node.target))
                raise UnsupportedModelError(
                    f"{op}{where} makes a tensor whose shape depends on the data ({tuple(v.shape)}); "
                    "aotcombo packages fixed shapes",
                    fix="compute a fixed-size result instead (torch.where with a mask, or a padded index list)",
                )


@contextlib.contextmanager
def _quiet_logs():
    """torch logs and prints whole graphs when a trace fails; our error says what matters."""
    import logging

    import io

    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # export prints partial graphs on failure
            yield
    finally:
        logging.disable(previous)


def _summary(exc: BaseException) -> str:
    """The first informative line of an exception, without torch's boilerplate."""
    while type(exc).__name__ in ("InductorError", "BackendCompilerFailed") and exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    # Inductor wraps errors as "NotImplementedError: " + the message on the next lines.
    while len(lines) > 1 and re.fullmatch(r"[\w.]+:", lines[0]):
        lines = lines[1:]
    head = lines[0] if lines else "(no message)"
    return f"{type(exc).__name__}: {head[:300]}"


def output_structure(spec) -> tuple:
    """A pytree spec as plain nested tuples: ``("leaf",)``, ``("tuple", children)``,
    ``("list", children)``, ``("dict", keys, children)``, ``("ordered_dict", keys, children)``
    (torchvision's segmentation and detection heads return one), ``("none",)``."""
    if spec.is_leaf():
        return ("leaf",)
    children = tuple(output_structure(c) for c in spec.children())
    if spec.type is type(None):
        return ("none",)
    if spec.type is dict or _is_model_output(spec.type):  # a transformers ModelOutput comes back as a dict
        return ("dict", tuple(spec.context), children)
    if spec.type is collections.OrderedDict:
        return ("ordered_dict", tuple(spec.context), children)
    if spec.type is list:
        return ("list", children)
    if getattr(spec.type, "__module__", "") == "torch.return_types":
        return ("structseq", f"torch.return_types.{spec.type.__name__}", children)
    if spec.type is tuple or (isinstance(spec.type, type) and issubclass(spec.type, tuple)):
        return ("tuple", children)
    raise UnsupportedModelError(
        f"the model returns a {spec.type.__name__}; aotcombo packages tensors in (nested) tuples, lists, dicts "
        "and OrderedDicts",
        fix="return a tuple or dict of tensors from forward()",
    )


def _is_model_output(kind) -> bool:
    """A transformers ``ModelOutput`` (an OrderedDict whose pytree context is its keys)."""
    return isinstance(kind, type) and any(c.__name__ == "ModelOutput" and c.__module__.startswith("transformers.")
                                          for c in kind.__mro__)


def _real_tensor(module: torch.nn.Module, dotted: str, constants: dict) -> torch.Tensor:
    """The real value of a weight: a module attribute, or a tensor literal of
    ``forward`` that export lifted (kept real on the CPU under the fake mode)."""
    from torch._subclasses.fake_tensor import FakeTensor

    try:
        return operator.attrgetter(dotted)(module).detach()
    except AttributeError:
        value = constants.get(dotted)
        if isinstance(value, torch.Tensor) and not isinstance(value, FakeTensor):
            return value.detach().clone()
        raise UnsupportedModelError(
            f"cannot recover the value of constant {dotted!r} the model creates in forward",
            fix="register it as a buffer in __init__ (self.register_buffer(...))",
        ) from None
