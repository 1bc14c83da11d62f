"""Find where the model dequantizes a linear's weight from integer bytes and scales, written in
torch ops whichever way (``quant.Quant`` says which layouts), and put one
``aotcombo::dequantize(q, [scale, zero], spec)`` call there, in the exported graph before
``combine`` and ``match`` see it.

Two forms:

- the scale multiplies the product: ``linear(x, q.to(dtype)) * scale`` (a scale per output
  channel): the multiply goes, the scale goes into the weight (its rounding of the product
  then comes once, after the scale, instead of before and after it);
- the weight is computed from the model's tensors alone (``q.to(dtype) * scale[:, None]``, or
  int4 nibbles unpacked with shifts and masks, grouped scales and zero points): its ops are
  run on the CPU on random bytes, scales and zero points of their shapes, and compared with
  each layout ``Quant`` can say; the one that gives the same weight is taken (ops of the same
  shapes, as every layer of a model has, are tried once).

A weight computed from one integer tensor of the model that no layout matches is refused
(``UnsupportedModelError`` naming the layer): its bytes would be dequantized per call.
"""

from __future__ import annotations

import operator

import torch

from ....errors import UnsupportedModelError
from ..common import recompiled
from .quant import Quant, dequantize_eager

aten = torch.ops.aten
_ASSERT = aten._assert_tensor_metadata.default
# what quantized bytes are held in (int16/int32: packed layouts aotcombo refuses); not indices
# (int64) or masks (bool), read by a weight's ops as the model's constants
_STORAGE = (torch.int8, torch.uint8, torch.int16, torch.int32)
_SCALE_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.unsqueeze.default,
                aten.slice.Tensor)
SUPPORTED = ("int8 or uint8 bytes [N, K] with a scale per output channel or per group along K; int4 two per "
             "byte along K ([N, K // 2], the even k in the low or high nibble) with a scale per group, a zero "
             "point or offset per group optional; dequantized as (q - zero) * scale or q * scale + offset, in "
             "plain torch ops, and read by F.linear")


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _weight_side(w):
    """The nodes that compute ``w`` and the placeholders they read, in graph order, or None
    when an op there is not a plain call."""
    nodes, leaves, stack, seen = [], [], [w], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder":
            leaves.append(node)
        elif node.op == "call_function" and node.target is not _ASSERT:
            nodes.append(node)
            stack += node.all_input_nodes
        else:
            return None
    order = {n: i for i, n in enumerate(w.graph.nodes)}
    return sorted(nodes, key=order.get), sorted(leaves, key=order.get)


def _on_cpu(value):
    if isinstance(value, torch.device):
        return torch.device("cpu")
    return value


def _evaluate(nodes: list, env: dict) -> torch.Tensor:
    """Run ``nodes`` on the CPU tensors ``env`` holds for their placeholders; the last one's value."""
    for node in nodes:
        args = torch.fx.node.map_arg(node.args, env.__getitem__)
        kwargs = {key: _on_cpu(v) for key, v in torch.fx.node.map_arg(node.kwargs, env.__getitem__).items()}
        env[node] = node.target(*args, **kwargs)
    return env[nodes[-1]]


def _random_like(val, generator, low=None, high=None) -> torch.Tensor:
    if not val.is_floating_point():
        info = torch.iinfo(val.dtype)
        low, high = (0, 16) if low is not None else (info.min, info.max + 1)
        return torch.randint(low, high, tuple(val.shape), generator=generator, dtype=val.dtype)
    return (torch.rand(tuple(val.shape), generator=generator) * (high - low) + low).to(val.dtype)


def _signature(nodes: list, leaves: list) -> tuple:
    """What the weight's ops compute, up to which tensors they read: equal for every layer of
    one shape."""
    index = {n: i for i, n in enumerate([*leaves, *nodes])}
    return tuple((str(n.target), repr(torch.fx.node.map_arg((n.args, n.kwargs), lambda a: index[a])))
                 for n in nodes) + tuple((str(_val(x).dtype), tuple(_val(x).shape)) for x in leaves)


def _candidates(q, floats, n: int, k: int, dtype: str):
    """``(bits, scale, zero, spec template)`` to try: the layouts whose shapes fit."""
    qv = _val(q)
    bits = 8 if tuple(qv.shape) == (n, k) else 4 if tuple(qv.shape) == (n, k // 2) and k % 2 == 0 else None
    if bits is None or qv.dtype not in (torch.int8, torch.uint8):
        return []
    found = []
    for scale in floats:
        groups = _val(scale).numel() // n
        if groups * n != _val(scale).numel() or not groups or k % groups or not _val(scale).is_floating_point():
            continue
        others = [z for z in floats if z is not scale]
        if len(others) > 1 or others and _val(others[0]).numel() != _val(scale).numel():
            continue
        for zero in (("point", "offset") if others else ("none",)):
            for high_first in ((False, True) if bits == 4 else (False,)):
                found.append((scale, others[0] if others else None,
                              Quant(bits, k // groups, high_first, zero, 0.0, dtype)))
    return found


def _layout(nodes, leaves, q, floats, constants: dict, n: int, k: int, dtype: str):
    """``(scale, zero, Quant)`` of the layout the weight's ops compute, or None."""
    generator = torch.Generator().manual_seed(0)
    env = {leaf: constants[leaf] for leaf in leaves if leaf not in floats and leaf is not q}
    for scale, zero, spec in _candidates(q, floats, n, k, dtype):
        # the constant subtracted from q: the weight of q = 0, a scale of 1 and no zero
        base = {q: torch.zeros(tuple(_val(q).shape), dtype=_val(q).dtype),
                scale: torch.ones(tuple(_val(scale).shape), dtype=_val(scale).dtype)}
        if zero is not None:
            base[zero] = torch.zeros(tuple(_val(zero).shape), dtype=_val(zero).dtype)
        w0 = _evaluate(nodes, {**env, **base}).float()
        if not bool((w0 == w0.flatten()[0]).all()):
            continue
        spec = Quant(spec.bits, spec.group, spec.high_first, spec.zero, -float(w0.flatten()[0]), spec.dtype)
        values = {q: _random_like(_val(q), generator), scale: _random_like(_val(scale), generator, 0.5, 1.5)}
        if zero is not None:
            values[zero] = _random_like(_val(zero), generator, 0.0, 4.0)
        got = _evaluate(nodes, {**env, **values}).float()
        want = dequantize_eager(values[q], values[scale], values.get(zero), spec).float()
        if got.shape == want.shape and float((got - want).abs().max()) <= 1e-2 * float(want.abs().max()) + 1e-6:
            return scale, zero, spec
    return None


def recognise(ep, module: torch.nn.Module) -> int:
    """Rewrite, in place in the ExportedProgram ``ep``, each linear whose weight the model
    dequantizes into ``linear(x, dequantize(q, [scale, zero], spec))``; returns how many."""
    from torch.export.graph_signature import InputKind

    graph = ep.graph
    kinds = {s.arg.name: s for s in ep.graph_signature.input_specs
             if s.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)}
    seen: dict = {}
    done = 0
    for linear in list(graph.nodes):
        if linear.target is not aten.linear.default or linear.kwargs or linear.graph is None:
            continue
        w = linear.args[1]
        if not isinstance(w, torch.fx.Node) or w.op == "placeholder" or _val(w).dim() != 2:
            continue
        side = _weight_side(w)
        if side is None or any(leaf.name not in kinds for leaf in side[1]):
            continue
        nodes, leaves = side
        integers = [leaf for leaf in leaves if _val(leaf).dtype in _STORAGE and _val(leaf).numel() > 1]
        if not integers:
            continue
        n, k = _val(w).shape
        dtype = str(_val(w).dtype).removeprefix("torch.")
        layer = kinds[integers[0].name].target.rpartition(".")[0] or kinds[integers[0].name].target
        found = _scaled_product(linear, w, integers, kinds, n, k, dtype) or _dequantized_weight(
            ep, module, kinds, nodes, leaves, integers, (n, k, dtype), seen)
        if found is None:
            raise UnsupportedModelError(
                f"layer {layer}: its weight [{n}, {k}] is computed from "
                + ", ".join(f"{kinds[x.name].target} ({str(_val(x).dtype).removeprefix('torch.')} "
                            f"{list(_val(x).shape)})" for x in leaves)
                + " in a way aotcombo does not recognise as a weight-only quantized layout, so a package would "
                "dequantize it on every call",
                fix=f"write it in one of the layouts aotcombo reads ({SUPPORTED}), or dequantize the weight into "
                    "a float parameter before the build")
        _replace(graph, linear, w, nodes, *found)
        done += 1
    return recompiled(ep, done, dead_code=True)


def _dequantized_weight(ep, module, kinds: dict, nodes: list, leaves: list, integers: list, shape: tuple, seen: dict):
    """A weight computed from one integer tensor and scales: ``(q, [scale, zero], Quant, None)``
    of the layout its ops compute (``seen``: by their signature, in leaf positions), or None."""
    floats = [leaf for leaf in leaves if _val(leaf).is_floating_point() and _val(leaf).numel() > 1]
    if len(integers) != 1 or not all(_val(x).is_contiguous() for x in [*integers, *floats]):
        return None
    key = _signature(nodes, leaves)
    if key not in seen:
        constants = {leaf: _real(module, ep, kinds[leaf.name].target) for leaf in leaves
                     if leaf not in integers and leaf not in floats}
        try:
            found = _layout(nodes, leaves, integers[0], floats, constants, *shape)
        except Exception:  # noqa: BLE001 - ops that do not run on the CPU: no layout of ours
            found = None
        seen[key] = found and (leaves.index(found[0]), found[1] and leaves.index(found[1]), found[2])
    if seen[key] is None:
        return None
    s, z, spec = seen[key]
    return integers[0], [leaves[s]] + ([] if z is None else [leaves[z]]), spec, None, []


def _real(module, ep, target: str) -> torch.Tensor:
    if target in ep.constants:
        return ep.constants[target]
    return operator.attrgetter(target)(module).detach()


def _scaled_product(linear, w, integers, kinds, n: int, k: int, dtype: str):
    """``linear(x, q.to(dtype)) * scale`` (a scale per output channel, of the product's dtype):
    ``(q, [scale], Quant, the multiply, the views of the scale)``, or None."""
    q = integers[0]
    if (w.target is not aten._to_copy.default or w.args[0] is not q or set(w.kwargs) != {"dtype"}
            or tuple(_val(q).shape) != (n, k) or not _val(q).is_contiguous()):
        return None
    users = [u for u in linear.users if u.target is not _ASSERT]
    if len(users) != 1 or users[0].target is not aten.mul.Tensor or users[0].kwargs:
        return None
    mul = users[0]
    scale = mul.args[1] if mul.args[0] is linear else mul.args[0]
    sv, chain = _val(scale), []
    while isinstance(scale, torch.fx.Node) and (scale.target in _SCALE_VIEWS or _is_cast(scale)):
        chain.append(scale)  # scale.view(1, -1), scale[None, :], scale.to(x.dtype): the same n values
        scale = scale.args[0]
    if (not isinstance(scale, torch.fx.Node) or scale.name not in kinds or sv is None or not sv.is_floating_point()
            or sv.numel() != n or sv.shape[-1] != n or sv.dim() > _val(linear).dim()
            or not _val(scale).is_floating_point() or _val(scale).numel() != n or not _val(scale).is_contiguous()
            or _val(mul).dtype != _val(linear).dtype or tuple(_val(mul).shape) != tuple(_val(linear).shape)):
        return None
    return q, [scale], Quant(8, k, False, "none", 0.0, dtype), mul, chain


def _is_cast(node) -> bool:
    return node.target is aten._to_copy.default and set(node.kwargs) == {"dtype"} and len(node.args) == 1


def _replace(graph, linear, w, nodes, q, operands, spec: Quant, mul, chain: list) -> None:
    with graph.inserting_before(linear):
        dequant = graph.call_function(torch.ops.aotcombo.dequantize.default, (q, operands, spec.to_json()))
    dequant.meta["val"] = torch.ops.aotcombo.dequantize.default(_val(q), [_val(o) for o in operands], spec.to_json())
    dequant.meta.update({key: value for key, value in w.meta.items() if key != "val"})
    linear.replace_input_with(w, dequant)
    if mul is not None:
        mul.replace_all_uses_with(linear)
        graph.erase_node(mul)
    for node in [*reversed(nodes), *chain]:
        for user in list(node.users):
            if user.target is _ASSERT:
                graph.erase_node(user)
        if not node.users:
            graph.erase_node(node)
    for leaf in (q, *operands):  # their dtype checks: the leaves are read by our op alone
        for user in list(leaf.users):
            if user.target is _ASSERT:
                graph.erase_node(user)
