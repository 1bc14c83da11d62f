"""The virtual GPU: a GPU of a given arch that is not there, for torch, dynamo, Inductor and
Triton. Device queries (capability, properties, rng state) and Triton's active driver are
stood in; FakeTensorMode is kept from folding literals onto a real device; matmul padding
is decided by rule where Inductor would time it."""

from __future__ import annotations

import contextlib
import types
from typing import Iterator
from unittest import mock

import torch

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
        _forget_triton_probes()
        try:
            yield
        finally:
            drivers._active = previous
            DeviceProperties.create.cache_clear()
            _forget_triton_probes()


def _forget_triton_probes() -> None:
    """torch caches what it finds out about Triton and the device (``torch.utils._triton``:
    ``has_triton`` and the TMA checks). A library that asked before the build, with no GPU
    here, left "no Triton" in those caches, and Inductor would then refuse to generate code
    (torchao does, imported by transformers whenever it is installed); answers given inside
    the virtual GPU must not outlive it either. Cleared on the way in and out."""
    import torch.utils._triton as probes

    for probe in vars(probes).values():
        if callable(getattr(probe, "cache_clear", None)):
            probe.cache_clear()

