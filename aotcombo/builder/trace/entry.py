"""``trace_model(module, example_inputs, arch)``: the model through ``torch.export`` and
Inductor for device ``cuda`` on fake tensors, on a machine with no GPU, as plain data.

The steps, each in its own module of this folder: the virtual GPU stands in for the device
(``virtual_gpu``); the model is exported on fake CUDA tensors (``export``); the exported
program is decomposed and rewritten (``decompositions``, ``passes``, and the linear-layer
rewrites of ``kernels/linear``); Inductor compiles it with its FX wrapper captured
(``capture``, ``wrapper_text``); the wrapper graph is read into ``graph.Graph``
(``to_graph``). Failures become errors a user can act on (``diagnosis``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import time

import torch

from ...errors import UnsupportedModelError
from ...runtime.manifest import Dynamic
from .. import graph as g
from ..inputs.usercode import where
from ..kernels.linear import combine as linear_combine, float8_tiles, match as linear_match, quant as linear_quant
from ..kernels.linear import activation_epilogue, quant_match
from ..kernels.attention import rope_fold
from ..kernels.conv import cudnn_epilogue
from . import decompositions, forked, guard_records, plain, specialization
from .attention_inputs import drop_copies_before_attention, scale_in_attention
from .attention_masks import make_masks_additive
from .capture import run_inductor
from .causal_masks import causal_masks
from .direct import decompose_exported
from .diagnosis import export_failure, inductor_failure, located, quiet_logs
from .export import export_on_fake_gpu
from .grouped_heads import read_grouped_heads
from .heap import freeze_more, frozen_heap
from .layout_guards import upsample_without_channel_guard
from .mask_rows import key_masks
from .passes import literals_on_the_gpu, reject_data_dependent_shapes, scatter_into_whole_buffers, write_state_in_place
from .to_graph import graph_from_fx, output_structure, real_tensor, refuse_other_libraries_ops
from .virtual_gpu import virtual_gpu


def trace_model(module: torch.nn.Module, example_inputs: tuple, arch: int, *, inductor_combo_kernels: bool = False,
                dynamic: Dynamic | None = None, max_tokens: int | None = None):
    """Trace ``module`` for a GPU of compute capability ``arch`` (e.g. 90).

    ``dynamic``: each of its axes is one symbolic size in its range, across the input dims
    that carry it; kernels then take the sizes that depend on them as arguments. ``max_tokens``:
    a size class of ``dynamic``, calls whose axes' product is at most this; linears of as few
    rows are then ours (``kernels/linear/match.fuse``), their rows read at run time.

    ``inductor_combo_kernels=True`` lets Inductor make its own combo kernels:
    only to count the launches ``torch.compile`` would make, for comparison.

    Returns ``(graph, weights, structure)``: the plain-data graph, the real
    tensors of every weight input by name, and the nesting of the model's
    outputs (see ``to_graph.output_structure``).
    """
    return trace_classes(module, example_inputs, arch, (max_tokens,), inductor_combo_kernels=inductor_combo_kernels,
                         dynamic=dynamic)[0]


def trace_classes(module: torch.nn.Module, example_inputs: tuple, arch: int, classes: tuple, *,
                  inductor_combo_kernels: bool = False, dynamic: Dynamic | None = None, note=None) -> list[tuple]:
    """``trace_model`` for each size class in ``classes`` (its ``max_tokens``; None: every
    size), exported and decomposed once, then compiled side by side (``_compile_side_by_side``).
    ``note(text)``: told when a class had to be traced again in this process."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    recording = guard_records.recording() if dynamic is not None else contextlib.nullcontext([])
    with virtual_gpu(arch), quiet_logs(), frozen_heap(), upsample_without_channel_guard(), recording as guards:
        fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        try:
            ep = export_on_fake_gpu(module, example_inputs, fake_mode, arch, dynamic, guards)
        except UnsupportedModelError as exc:  # ours, raised while tracing (attention): add the model's line
            raise located(exc, where(exc)) from None
        except Exception as exc:  # noqa: BLE001 - every export failure is the model's
            raise export_failure(module, exc, len(example_inputs)) from exc
        reject_data_dependent_shapes(ep)
        exported = specialization.baseline(specialization.shape_env(ep))  # guards after it: ours, Inductor's
        # Functional ATen: in-place updates of inputs become extra outputs; fallbacks with a
        # plain formulation become ops Inductor writes kernels for (decompositions.py).
        # (Not when counting Inductor's own launches: torch.compile makes those fallbacks.)
        table = {} if inductor_combo_kernels else decompositions.table()
        if not decompose_exported(ep, table):  # a program that mutates its buffers: functionalized
            ep = ep.run_decompositions(table)
        literals_on_the_gpu(ep)
        if not inductor_combo_kernels:
            quant_match.recognise(ep, module)  # weights the model dequantizes: one op each
            linear_combine.combine(ep, module)
            linear_combine.fold_residuals(ep)
            if float8_tiles.unit_scaled(ep.graph, arch):  # per-row float8 linears of few tiles
                ep.graph_module.recompile()
        freeze_more()  # the exported program, which every class reads (and which a child shares)
        compile_class = functools.partial(_compile, module=module, arch=arch,
                                          inductor_combo_kernels=inductor_combo_kernels, dynamic=dynamic,
                                          guards_since=exported, guards=guards)
        if len(classes) == 1 or not forked.available():  # one after the other, the last on ep itself
            return [compile_class(ep if t == classes[-1] else copy.deepcopy(ep), max_tokens=t) for t in classes]
        done, failed = _compile_side_by_side(ep, module, classes, compile_class)
    for max_tokens, why in failed.items():  # traced anew, in this process (one class: no child)
        if note:
            note(f"calls of up to {max_tokens} tokens: the process tracing them beside this one failed ({why}); "
                 "tracing them here")
        done[max_tokens] = trace_classes(module, example_inputs, arch, (max_tokens,), dynamic=dynamic)[0]
    return [done[t] for t in classes]


def _compile_side_by_side(ep, module, classes: tuple, compile_class) -> tuple[dict, dict]:
    """``compile_class(ep, max_tokens=...)`` for each class: each but the largest (the most tokens;
    None: every size) in a child forked now, with the program as it is, while this process compiles
    the largest on ``ep`` itself. A child sends its trace back as the build cache stores it
    (``plain``). Returns the traces by class, and why for each class whose child failed (then not
    among the traces)."""
    largest = max(classes, key=lambda t: math.inf if t is None else t)
    children = {t: forked.Child(functools.partial(_as_plain, compile_class, ep, t, module))
                for t in classes if t != largest}
    done, failed = {}, {}
    try:
        started = time.perf_counter()
        done[largest] = compile_class(ep, max_tokens=largest)
        wait = forked.wait_seconds(time.perf_counter() - started)
        for t, child in children.items():
            entry, why = child.result(wait)
            weights = plain.weights_of(module, entry["graph"], entry["constants"]) if entry else None
            if weights is None:
                failed[t] = why or "a weight of its trace is not the model's"
                continue
            done[t] = entry["graph"], weights, entry["structure"]
    finally:
        for child in children.values():
            child.stop()
    return done, failed


def _as_plain(compile_class, ep, max_tokens, module) -> dict:
    """In a child: the class's trace, as plain data."""
    return plain.entry_of(module, *compile_class(ep, max_tokens=max_tokens))


def _compile(ep, module, arch: int, inductor_combo_kernels: bool, dynamic: Dynamic | None, max_tokens: int | None,
             guards_since: specialization.Baseline | None = None, guards: list = ()):
    """The rest of ``trace_model`` for one size class, on its own copy of the exported program;
    with dynamic axes, refused if it assumed of their sizes what their ranges do not hold (a
    guard added since the export's, ``guards_since``)."""
    from torch.export.graph_signature import InputKind, OutputKind

    if not inductor_combo_kernels:
        if dynamic is None or max_tokens:  # its kernels are sized at build time, or for the class's bound
            linear_match.fuse(ep, max_tokens)
        activation_epilogue.fuse(ep)  # the activations of those left to cuBLAS: in its epilogue
        cudnn_epilogue.fuse(ep)  # a convolution's BatchNorm in its weights, its ReLU in cuDNN's epilogue
        linear_quant.expand(ep)  # those no kernel of ours reads: back to ATen ops
        causal_masks(ep)  # a causal mask made of constants: is_causal, no mask
        read_grouped_heads(ep)  # no key/value copy per query head
        key_masks(ep)  # a padding mask: one row of keys per batch, our prefill kernel's
        make_masks_additive(ep)  # once, not in every layer's attention call
        drop_copies_before_attention(ep)  # it reads q, k and v through their strides
        scale_in_attention(ep)  # a power-of-two factor on the query: in the call's scale
    signature = ep.graph_signature
    scatter_into_whole_buffers(ep)
    state = write_state_in_place(ep)
    if not inductor_combo_kernels:
        rope_fold.fold(ep)  # a decode step's rotary embedding and cache write: in its attention kernel
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
        fx_wrapper, kernels = run_inductor(gm, fake_inputs, inductor_combo_kernels, dynamic is not None)
    except UnsupportedModelError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise inductor_failure(exc, arch) from exc
    graph = graph_from_fx(fx_wrapper, kernels, input_meta, arch, dynamic)
    if dynamic is not None and guards_since is not None:
        specialization.refuse_new_guards(specialization.shape_env(ep), guards_since, guards)
    refuse_other_libraries_ops(graph, gm)
    placeholder = {s.arg.name: i for i, s in enumerate(signature.input_specs)}
    mutations = tuple(
        (graph.inputs[placeholder[s.target]].name, i)
        for i, s in enumerate(signature.output_specs)
        if s.kind == OutputKind.USER_INPUT_MUTATION
    )
    graph = g.replace(graph, mutations=mutations, dynamic=dynamic, state=state)

    weights = {key: real_tensor(module, key, ep.constants) for kind, key in input_meta if kind == "weight"}
    return graph, weights, output_structure(ep.call_spec.out_spec)
