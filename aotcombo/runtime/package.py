"""A generated package, loaded: the variant for the GPU, its kernels, its program.

Streams: a launcher (``cuda.Kernel``) takes the stream first; the program calls
``kernels[i](*args)``. So a Model keeps, per stream it has run on, its launchers bound
to that stream (``functools.partial``: no extra Python frame); a call reads torch's
current raw stream once and hands the program that list: one dict look-up per call,
nothing per launch, no state shared by threads on their own streams. Contexts: a call
checks cuCtxGetCurrent once; on a thread where another context (or none) is current,
it makes the device's primary context current and puts the other back after.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import threading

import torch

from . import cuda

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def choose_variant(manifest: dict, arch: int, device_name: str | None = None) -> str:
    """The key of the variant that runs on a GPU of compute capability ``arch`` (e.g. 86).

    An exact cubin; else a cubin of the same major and a lower minor (not from 90 on:
    Triton builds those for sm_90a, sm_100a..., which run only on their own arch); else
    the PTX, when the driver can JIT it for this arch.
    """
    variants, archs, ptx = manifest["variants"], manifest.get("archs") or [], manifest.get("ptx_arch")
    if f"sm_{arch}" in variants:
        return f"sm_{arch}"
    same_major = [a for a in archs if a < 90 and a // 10 == arch // 10 and a < arch and f"sm_{a}" in variants]
    if same_major:
        return f"sm_{max(same_major)}"
    if ptx is not None and "ptx" in variants and (ptx == arch or ptx < 90 and ptx < arch):
        return "ptx"
    cubins = f"cubins for {', '.join(f'sm_{a}' for a in archs)}" if archs else "no cubins"
    device = f"this device ({device_name})" if device_name else "this device"
    raise RuntimeError(f"package {manifest.get('name')} has {cubins} and "
                       f"{f'PTX for sm_{ptx}+' if ptx is not None else 'no PTX'}; "
                       f"{device} is sm_{arch}: rebuild with --arch sm_{arch}")


def input_specs(inputs: list[dict]) -> list[tuple]:
    """The manifest's inputs as (name, dtype, shape, stride, align) tuples for check_inputs."""
    return [(s["name"], getattr(torch, s["dtype"]), tuple(s["shape"]), tuple(s["stride"]), s.get("align", 1))
            for s in inputs]


def check_inputs(specs: list[tuple], inputs: tuple, device: torch.device | None = None) -> None:
    """Raise TypeError (type, dtype) or ValueError (the rest) unless the inputs match the specs.

    ``device=None`` skips the device check.
    """
    if len(inputs) != len(specs):
        raise ValueError(f"expected {len(specs)} inputs ({', '.join(s[0] for s in specs)}), got {len(inputs)}")
    for i, ((name, dtype, shape, stride, align), t) in enumerate(zip(specs, inputs)):
        what = f"input {i} ({name!r})"
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
        if device is not None and t.device != device:
            raise ValueError(f"{what}: expected device {device}, got {t.device}")
        if t.dtype != dtype:
            raise TypeError(f"{what}: expected dtype {dtype}, got {t.dtype}")
        if t.shape != shape:
            raise ValueError(f"{what}: expected shape {shape}, got {tuple(t.shape)}")
        if t.stride() != stride:
            raise ValueError(f"{what}: expected stride {stride}, got {t.stride()}")
        if t.data_ptr() % align:
            raise ValueError(f"{what}: expected data_ptr aligned to {align} bytes, got one {t.data_ptr() % align} "
                             f"bytes past (storage offset {t.storage_offset()})")


class Model:
    """A package loaded on one device: ``model(*inputs)`` returns the outputs."""

    def __init__(self, name, variant, device, context, program, kernels, weights, specs, check_inputs=True):
        self.name, self.variant, self.device, self.weights = name, variant, device, weights
        self._context, self._forward, self._kernels = context, program.forward, kernels
        self._specs, self.check_inputs, self._bound = specs, check_inputs, {}

    def __call__(self, *inputs):
        if self.check_inputs:
            check_inputs(self._specs, inputs, self.device)
        stream = _raw_stream(self.device.index)
        kernels = self._bound.get(stream)
        if kernels is None:
            if len(self._bound) > 64:  # a program that makes a stream per call
                self._bound.clear()
            kernels = self._bound[stream] = [functools.partial(k, stream) for k in self._kernels]
        previous = cuda.current_context()
        if previous == self._context:
            return self._forward(kernels, self.weights, self.device, *inputs)
        cuda.set_current_context(self._context)
        try:
            return self._forward(kernels, self.weights, self.device, *inputs)
        finally:
            cuda.set_current_context(previous)

    def __repr__(self):
        return f"<Model {self.name} {self.variant} on {self.device}>"


def _device_index(device) -> int:
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"device must be 'cuda' or 'cuda:N', got {str(device)!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"cannot load on {d}: torch.cuda is not available (torch {torch.__version__}, "
                           f"CUDA {torch.version.cuda}): a GPU and an NVIDIA driver are needed")
    index, count = torch.cuda.current_device() if d.index is None else d.index, torch.cuda.device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"cannot load on cuda:{index}: {count} CUDA device(s) visible")
    return index


class Package:
    """The package in ``pkg_dir``, imported as ``import_name`` (default: the manifest's name)."""

    def __init__(self, pkg_dir, import_name: str | None = None):
        self.dir, self._import_name = os.fspath(pkg_dir), import_name
        self._manifest, self._loaded, self._lock = None, {}, threading.Lock()

    @property
    def manifest(self) -> dict:
        if self._manifest is None:
            with open(os.path.join(self.dir, "manifest.json")) as f:
                manifest = json.load(f)
            if manifest.get("format") != 1:
                raise RuntimeError(f"{self.dir}: manifest format {manifest.get('format')} is not 1, "
                                   "the one this runtime reads")
            self._manifest = manifest
        return self._manifest

    def load(self, device="cuda", check_inputs: bool = True) -> Model:
        """Load the model on ``device`` ("cuda" for the current one, or "cuda:N"), once per device."""
        index = _device_index(device)
        with self._lock:
            if index not in self._loaded:
                self._loaded[index] = self._load(index)
        return Model(*self._loaded[index], check_inputs)

    def _load(self, index: int) -> tuple:
        m, device, props = self.manifest, torch.device("cuda", index), torch.cuda.get_device_properties(index)
        variant = choose_variant(m, props.major * 10 + props.minor, props.name)
        spec, context = m["variants"][variant], cuda.primary_context(index)
        previous, modules, kernels = cuda.current_context(), {}, []
        cuda.set_current_context(context)
        try:
            for k in spec["kernels"]:
                if k["image"] not in modules:
                    try:
                        with open(os.path.join(self.dir, k["image"]), "rb") as f:
                            modules[k["image"]] = cuda.load_module(f.read())
                    except cuda.CudaError as e:
                        raise cuda.CudaError(f"{self.dir}/{k['image']}: {e}") from None
                kernels.append(cuda.Kernel(cuda.get_function(modules[k["image"]], k["function"]), k["grid"],
                                           k["num_warps"], k["shared"], k["params"], k["global_scratch"],
                                           k["profile_scratch"], device))
        finally:
            cuda.set_current_context(previous)
        weights = torch.load(os.path.join(self.dir, m["weights"]), weights_only=True,
                             map_location=device) if m.get("weights") else []
        program = importlib.import_module(f"{self._import_name or m['name']}.{spec['program']}")
        return m["name"], variant, device, context, program, kernels, weights, input_specs(m["inputs"])
