"""Passes over the exported program before Inductor sees it: literals moved to the GPU,
partial-buffer updates made whole, state written in place, data-dependent shapes refused."""

from __future__ import annotations

import torch

from ...errors import UnsupportedModelError
from .diagnosis import node_where

def literals_on_the_gpu(ep) -> None:
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


def scatter_into_whole_buffers(ep) -> None:
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
        if (base.op != "placeholder" or base.name not in buffers or tuple(rest[:2]) != (0, 0)
                or rest[3:] not in ([], [1])):
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
        if (rows.target is not aten.slice.Tensor or rows.args[:3] != (base, 0, 0)
                or rows.args[3:] not in ([end], (end,))
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


def write_state_in_place(ep) -> tuple[str, ...]:
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
                f"the model writes its parameter {spec.target} in forward{node_where(value)}",
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


def reject_data_dependent_shapes(ep) -> None:
    """An op whose output size depends on data fails the build (a dynamic batch is fine)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    for node in ep.graph.nodes:
        val = node.meta.get("val")
        values = val if isinstance(val, (list, tuple)) else [val]
        for v in values:
            if isinstance(v, torch.Tensor) and free_unbacked_symbols(v):
                where = node_where(node)
                op = getattr(node.target, "__name__", str(node.target))
                raise UnsupportedModelError(
                    f"{op}{where} makes a tensor whose shape depends on the data ({tuple(v.shape)}); "
                    "aotcombo packages fixed shapes",
                    fix="compute a fixed-size result instead (torch.where with a mask, or a padded index list)",
                )
