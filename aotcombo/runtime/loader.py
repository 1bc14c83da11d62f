"""A generated package, loaded: the variant for the GPU, its kernels, its program.

``Package(dir).load("cuda:0")`` reads the manifest, loads the kernels and weights once per
device, then returns a ``Model`` (op by op) or a graph-mode model around them (graphs.py),
or for a package of several batch sizes a ``BucketedModel`` (buckets.py).

Streams: a Model keeps, per stream it has run on, its kernels' launchers bound to that
stream (``cuda.LoadedKernel.bind``); a call reads torch's current raw stream once and hands the
program that list: one dict look-up per call, nothing per launch, no state shared by
threads on their own streams. Contexts: a call checks cuCtxGetCurrent once; on a thread
where another context (or none) is current, it makes the device's primary context
current and puts the other back after.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import threading
from typing import NamedTuple

import torch

from . import cuda, parallel
from .buckets import BucketedModel
from .checks import Options, check_options, check_torch, choose_variant
from .graphs import GraphModel
from .per_size import GraphPerSize, SizeCounts, run_counted
from .size_classes import SizeClasses
from .inputs import InputSpec, allocate, axis_dims, bind, make_input_check, sizes_of
from .manifest import (CAPTURE_AFTER, GROUP, MAX_GRAPHS, PLACED, Buckets, ComboKernel, Manifest, ManifestError,
                       dynamic_axes)
from .state import State, weights_for_load

MAX_STREAMS = 64  # bound launchers kept per model: past that (a stream per call), they are dropped


class Loaded(NamedTuple):
    """What a package loads once per device and input shape, shared by the models loaded there."""

    name: str
    variant: str
    device: torch.device
    context: int
    forward: object
    kernels: list
    specs: list[InputSpec]
    ranges: dict | None = None  # each dynamic axis's (min, max)
    collectives: bool = False  # tensor parallel: its forward runs collectives with the other ranks
    prepare: object = None  # the program's work on the weights alone, run once per load
    prepare_key: str | None = None  # equal for buckets whose prepare is the same


class _Device(NamedTuple):
    device: torch.device
    variant: str
    context: int
    weights: dict  # the packaged tensors on the device, by name
    modules: dict  # image path -> CUmodule


class Model:
    """A package loaded on one device, run op by op: ``model(*inputs)`` returns the outputs.

    ``input_check(inputs)`` checks inputs against ``specs`` (None with ``check_inputs=False``)
    and says whether they have the built strides and alignment (others are copied into it);
    ``run(inputs)`` runs the forward on inputs known to be right. ``weights``: the program's,
    in its order; ``state``: the buffers among them that forward updates (state.py)."""

    def __init__(self, loaded: Loaded, weights: list, state: State, check_inputs: bool = True,
                 prepared: dict | None = None, capture_after: int = 0):
        self.name, self.variant, self.device, self.weights = loaded.name, loaded.variant, loaded.device, weights
        self.specs, self.ranges, self.state_buffers = loaded.specs, loaded.ranges, state
        self.mutated = tuple(i for i, s in enumerate(self.specs) if s.mutated)
        self.input_check = (make_input_check(self.specs, self.device, self.ranges, exact_layout=False)
                            if check_inputs else None)
        # the device's primary context; the kernels as loaded (cuda.LoadedKernel, or GridPerCall)
        self.context, self.kernels, self._forward = loaded.context, loaded.kernels, loaded.forward
        self.collectives = loaded.collectives
        self._index, self._bound, self._static = self.device.index, {}, None
        if loaded.prepare is not None:  # what depends on the weights alone, computed once per load
            if prepared is None or loaded.prepare_key is None:
                prepared = {}  # else shared by the buckets of one load
            if loaded.prepare_key not in prepared:
                stream = cuda.current_stream(self._index)
                prepared[loaded.prepare_key] = self._in_context(loaded.prepare, self._bind(stream), self.weights)
                torch.cuda.current_stream(self.device).synchronize()  # ready for a call on any stream
            self.weights = prepared[loaded.prepare_key]
        self.names = [s.name for s in self.specs]
        # dynamic axes, op by op (graphs=False): a size's calls before its capture_after-th without cuDNN's plans
        self._capture_after = capture_after if self.ranges else 0
        self._counts = SizeCounts((GraphPerSize.PENDING + 1) * MAX_GRAPHS) if self._capture_after else None

    def __call__(self, *inputs, **named):
        if named:
            inputs = bind(self.names, inputs, named)
        if self._counts is not None:
            return run_counted(self, inputs, self._counts, self._capture_after)
        if self.input_check is not None and not self.input_check(inputs):
            return self.run_staged(inputs)
        return self.run(inputs)

    def run_staged(self, inputs: tuple):
        """The forward on inputs of other strides or alignment than the kernels were built for:
        copied into that layout first (and those the model updates, copied back after)."""
        staged = allocate(self.specs, self.device, sizes_of(self.specs, inputs))
        for target, source in zip(staged, inputs):
            target.copy_(source)
        outputs = self.run(staged)
        for i in self.mutated:
            inputs[i].copy_(staged[i])
        return outputs

    def run(self, inputs: tuple, out: list | None = None):
        """The forward on ``inputs``, unchecked, queued on torch's current stream. ``out``: a
        tensor per output, laid out as the forward's own; the outputs the program allocates
        itself are written there (the others are returned as usual)."""
        stream = cuda.current_stream(self._index)
        kernels = self._bound.get(stream)
        if kernels is None:
            kernels = self._bind(stream)
        placed = {PLACED: out} if out is not None else {}
        if cuda.current_context() == self.context:
            return self._forward(kernels, self.weights, self.device, *inputs, **placed)
        return self._in_context(self._forward, kernels, self.weights, *inputs, **placed)

    def _in_context(self, program_function, kernels: list, weights: list, *inputs, **named):
        """``program_function`` (forward, or prepare) in the device's context."""
        previous = cuda.current_context()
        cuda.set_current_context(self.context)
        try:
            return program_function(kernels, weights, self.device, *inputs, **named)
        finally:
            cuda.set_current_context(previous)

    def _bind(self, stream: int) -> list:
        if len(self._bound) > MAX_STREAMS:
            self._bound.clear()
        kernels = self._bound[stream] = [k.bind(stream) for k in self.kernels]
        return kernels

    def state(self) -> dict[str, torch.Tensor]:
        """The buffers forward updates (a KV cache), live, by the model's names: calls read and
        write them in place; ``load(state=...)`` of another package can share them."""
        return dict(self.state_buffers.tensors)

    def reset_state(self) -> None:
        """Put the state back to the values the model was loaded with."""
        self.state_buffers.reset()

    def static_inputs(self) -> tuple:
        """Input tensors made once, as in graph mode; here a call reads any inputs in place."""
        if self.ranges is not None:
            raise ValueError(f"{self.name} has dynamic axes ({', '.join(self.ranges)}): its inputs have no one "
                             "static shape")
        if self._static is None:
            self._static = allocate(self.specs, self.device)
        return self._static

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
    """The package in ``pkg_dir``, imported as ``import_name`` (default: the manifest's name);
    ``manifest_sha256``: the manifest's, as the build wrote it into the package's ``__init__``
    (checked when the manifest is read; each kernel image is checked against the sha256 the
    manifest gives it as it loads, the weights file against its size)."""

    def __init__(self, pkg_dir, import_name: str | None = None, manifest_sha256: str | None = None):
        self.dir, self._import_name, self._manifest_sha256 = os.fspath(pkg_dir), import_name, manifest_sha256
        self._manifest, self._loaded, self._devices, self._lock = None, {}, {}, threading.Lock()

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:
            path = os.path.join(self.dir, "manifest.json")
            try:
                with open(path, "rb") as f:
                    data = f.read()
                if self._manifest_sha256 and hashlib.sha256(data).hexdigest() != self._manifest_sha256:
                    raise ManifestError("its sha256 is not the one the build recorded (it changed after the build)")
                self._manifest = Manifest.from_json(data)
            except (OSError, ManifestError) as e:
                raise RuntimeError(f"{path}: {e}: the package is damaged or was not built by this aotcombo; "
                                   "reinstall or rebuild it") from None
        return self._manifest

    def load(self, device="cuda", *, graphs: bool | None = None, copy_outputs: bool = True,
             check_inputs: bool = True, weights=None, state=None, rank: int | None = None,
             world_size: int | None = None, max_graphs: int = MAX_GRAPHS,
             capture_after: int = CAPTURE_AFTER) -> Model | GraphModel | GraphPerSize | BucketedModel:
        """Load the model on ``device`` ("cuda" for the current one, or "cuda:N").

        Kernels and weights load once per device. ``graphs``: capture the forward in a CUDA
        graph now and replay it per call (default; falling back to op by op, with a warning,
        if the capture fails; with dynamic axes, a graph per distinct sizes, captured at their
        ``capture_after``-th call, at most ``max_graphs`` of them held, the least recently
        called dropped for a new one: per_size.py; ``graphs=False`` with dynamic axes: a size's calls
        before its ``capture_after``-th run attention without cuDNN's per-shape plan, as graph mode's
        before a capture). ``copy_outputs=False`` (graph mode): return the graph's own output
        tensors, valid until the next call. ``check_inputs=False``: skip the per-call input
        check. A package built for several batch sizes returns a ``BucketedModel``, which
        loads each bucket at its first call. ``weights``: tensors by the model's names (its
        ``state_dict()``) to use instead of the packaged ones; a package built with ``--weights
        external`` needs them (the caller's tensors on ``device`` are used as they are, others
        copied there). ``state``: another loaded model's ``state()`` to share (e.g. one KV cache
        for a prefill and a decode package); by default the load holds its own.

        A tensor-parallel package (``build --tensor-parallel N``) loads in each of N processes
        after ``torch.distributed.init_process_group("nccl")`` (``torchrun``), each as its rank
        in that group, holding its slice of the weights (``weights``: whole tensors; each rank
        cuts its own). ``rank`` and ``world_size``, if given, are checked against the group.
        """
        options = check_options(graphs, copy_outputs, check_inputs, max_graphs, capture_after)
        check_torch(self.manifest)
        index, shapes = _device_index(device), self.manifest.shapes
        rank = parallel.check_group(self.manifest, torch.device("cuda", index), rank, world_size)
        dev = self._device(index, rank)
        weights, held = weights_for_load(self.manifest, dev.weights, dev.device, weights, state, rank)
        if isinstance(shapes, Buckets):
            names, prepared = [i.name for i in self.manifest.inputs], {}
            return BucketedModel(self.manifest.name, dev.device,
                                 lambda size: self._model(index, size, options, weights, held, prepared), shapes,
                                 names, held)
        prepared = {}  # the work on the weights at load, once for the size classes that share it
        rest = self._model(index, None, options, weights, held, prepared)
        if len(self.manifest.specializations) == 1:
            return rest
        classes = [(most, self._model(index, None, options, weights, held, prepared, tokens=most))
                   for most in self.manifest.size_classes]
        where = tuple(axis_dims([InputSpec.of(i) for i in self.manifest.inputs]).values())
        return SizeClasses(classes, rest, where)

    def _model(self, index: int, bucket: int | None, options: Options, weights: list, state: State,
               prepared: dict | None = None, tokens: int | None = None):
        """The model of one input shape (or size class: ``tokens``) on a device: op by op when
        ``graphs`` is False, else in graph mode (``graphs=True``: a failed capture raises; None:
        it falls back to op by op)."""
        key = (index, bucket, tokens)
        with self._lock:
            if key not in self._loaded:
                self._loaded[key] = self._load(index, bucket, tokens)
        graphs, copy_outputs = options.graphs, options.copy_outputs
        if graphs is False:  # op by op
            return Model(self._loaded[key], weights, state, options.check_inputs, prepared,
                         capture_after=options.capture_after)
        model = Model(self._loaded[key], weights, state, options.check_inputs, prepared)
        if dynamic_axes(self.manifest.shapes):  # a graph per size, at its capture_after-th call
            return GraphPerSize(model, copy_outputs, options.max_graphs, strict=bool(graphs),
                                capture_after=options.capture_after)
        graph = GraphModel(model, copy_outputs, strict=bool(graphs))
        return graph.capture() if graphs else graph  # graphs=True: now, so that a failed capture raises here

    def _device(self, index: int, rank: int | None = None) -> _Device:
        """What is loaded once per device: the variant chosen, the context, weights, modules."""
        if index not in self._devices:
            m, props = self.manifest, torch.cuda.get_device_properties(index)
            variant = choose_variant(m, props.major * 10 + props.minor, props.name)
            device = torch.device("cuda", index)
            packaged = [t.name for t in m.weights.tensors if not t.external]
            tensors = self._weights(device, rank) if m.weights.file else []
            if len(tensors) != len(packaged):
                raise RuntimeError(f"{m.weights.file}: {len(tensors)} tensors, the manifest lists {len(packaged)}: "
                                   "the package is damaged; reinstall or rebuild it")
            self._devices[index] = _Device(device, variant, cuda.primary_context(index),
                                           dict(zip(packaged, tensors)), {})
        return self._devices[index]

    def _weights(self, device: torch.device, rank: int | None) -> list:
        """The packaged tensors, loaded onto ``device`` (tensor parallel: ``rank``'s slices of the
        whole tensors, mapped in from the file: never all of them on the GPU)."""
        w = self.manifest.weights
        path = os.path.join(self.dir, w.file)
        size = os.path.getsize(path) if os.path.exists(path) else None
        if size != w.file_bytes:
            found = "is missing" if size is None else f"has {size} bytes, the manifest says {w.file_bytes}"
            raise RuntimeError(f"{path} {found}: the package is damaged; reinstall or rebuild it")
        try:
            if rank is None:
                return torch.load(path, weights_only=True, map_location=device)
            whole = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
            held = [t for t in self.manifest.weights.tensors if not t.external]
            return [parallel.rank_slice(t, w, rank, self.manifest.world_size).to(device) for t, w in zip(held, whole)]
        except Exception as e:  # noqa: BLE001 - a damaged pickle raises anything
            raise RuntimeError(f"{path}: cannot be read ({type(e).__name__}: {e}): the package is damaged; "
                               "reinstall or rebuild it") from None

    def _load(self, index: int, bucket: int | None, tokens: int | None = None) -> Loaded:
        """One input shape (the package's, one bucket's, or one size class's) loaded on a device."""
        dev, m = self._device(index), self.manifest
        shape = m.specialization(bucket, tokens)
        variant = shape.variants[dev.variant]
        previous = cuda.current_context()
        cuda.set_current_context(dev.context)
        try:
            kernels = [self._kernel(k, dev) for k in variant.kernels]
        finally:
            cuda.set_current_context(previous)
        program = importlib.import_module(f"{self._import_name or m.name}.{variant.program}")
        name = m.name if bucket is None else f"{m.name}[{m.shapes.axis} {bucket}]"
        name += f" (calls of up to {tokens} tokens)" if tokens is not None and len(m.specializations) > 1 else ""
        dynamic = dynamic_axes(m.shapes)
        ranges = dynamic.ranges if dynamic else None
        forward = program.forward if m.world_size == 1 else \
            functools.partial(program.forward, **{GROUP: parallel.group_name()})  # its collectives' group
        return Loaded(name, dev.variant, dev.device, dev.context, forward, kernels,
                      [InputSpec.of(i) for i in shape.inputs], ranges, m.world_size > 1,
                      getattr(program, "prepare", None), variant.prepare_key)

    def _kernel(self, k: ComboKernel, dev: _Device):
        """A kernel of the variant, its image loaded once per device into the current context."""
        if k.image not in dev.modules:
            path = os.path.join(self.dir, k.image)
            try:
                with open(path, "rb") as f:
                    image = f.read()
                if hashlib.sha256(image).hexdigest() != k.sha256:
                    raise cuda.CudaError("its sha256 is not the one the manifest records: the package is damaged "
                                         "(a file changed after the build); reinstall or rebuild it")
                dev.modules[k.image] = cuda.load_module(image)
            except (OSError, cuda.CudaError) as e:
                raise cuda.CudaError(f"{path}: {e}") from None
        kernel = cuda.LoadedKernel(cuda.get_function(dev.modules[k.image], k.function), k.grid, k.num_warps, k.shared,
                             k.params, k.global_scratch, k.profile_scratch, dev.device, pdl=k.pdl)
        return GridPerCall(kernel) if k.dynamic_grid else kernel


class GridPerCall:
    """A kernel whose grid the program passes first at each launch (a dynamic batch).

    Bound to a stream, it keeps one launcher per grid size seen, made on first use (tens
    of microseconds) from a copy of the kernel with that grid; the kernel's scratch, if
    any, is sized for the largest grid, which the manifest gives.
    """

    def __init__(self, kernel: cuda.LoadedKernel):
        self.kernel = kernel

    def bind(self, stream: int):
        launchers, kernel = {}, self.kernel

        def launch(grid: int, *args):
            run = launchers.get(grid)
            if run is None:
                if not 0 < grid <= kernel.grid[0]:
                    raise ValueError(f"grid {grid} is outside 1..{kernel.grid[0]}, the range the kernel was built for")
                run = launchers[grid] = kernel.sized(grid).bind(stream)
            run(*args)

        return launch
