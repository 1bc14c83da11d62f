"""``torch.export`` on fake CUDA tensors: the model copied onto fake tensors (with the references
plain objects hold to its buffers), attention chosen by arch, and forward watched for Python
state it changes."""

from __future__ import annotations

import copy
import functools
import inspect
import re
import types
from unittest import mock

import torch

from ...errors import UnsupportedModelError
from ...runtime.manifest import Dynamic
from . import axis_errors

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
        if enable_gqa and q.dim() == k.dim() == v.dim() == 4 and q.shape[1] != k.shape[1] \
                and q.shape[1] % k.shape[1] == 0 and k.shape[1] == v.shape[1]:
            # each key/value head repeated for its query heads, as transformers' repeat_kv does:
            # grouped_heads.read_grouped_heads then reads the un-repeated ones instead (no copy)
            group = q.shape[1] // k.shape[1]
            k, v = (t[:, :, None].expand(t.shape[0], t.shape[1], group, *t.shape[2:]).reshape(
                t.shape[0], t.shape[1] * group, *t.shape[2:]) for t in (k, v))
            enable_gqa = False
        head_dim = q.shape[-1]
        fused_ok = (
            q.dim() == 4
            and not enable_gqa
            and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and k.shape[-1] == head_dim == v.shape[-1]
            and head_dim % 8 == 0
        )
        half = q.dtype in (torch.float16, torch.bfloat16)
        if fused_ok and attn_mask is None and half and arch >= 80 and head_dim <= 256:
            return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, is_causal, False, scale=scale)[0]
        if fused_ok and head_dim <= 512:
            return aten._scaled_dot_product_efficient_attention(q, k, v, attn_mask, False, 0.0, is_causal,
                                                                scale=scale)[0]
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            # The private op adds its mask: a boolean one becomes 0 where True, -inf where False
            # first, as the public function does (Falcon's one key/value head under a padding mask).
            attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(q.dtype)
        return aten._scaled_dot_product_attention_math(
            q, k, v, attn_mask, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa
        )[0]

    return attention


def export_on_fake_gpu(module, example_inputs, fake_mode, arch, dynamic: Dynamic | None = None, guards: list = ()):
    """``torch.export`` on fake CUDA tensors; ``dynamic`` makes each of its axes one symbolic
    size, in its range, across the input dims that carry it."""
    fake_module, aliases = _fake_cuda_module(module, fake_mode)
    with fake_mode:
        fake_inputs = tuple(_fake_like(t) for t in example_inputs)
        dynamic_shapes = _dynamic_shapes(fake_module, fake_inputs, dynamic)
        changed = _watch_python_state(fake_module)
        _bind_aliases(fake_module, aliases)
        attention = mock.patch.object(torch.nn.functional, "scaled_dot_product_attention", _attention_for(arch))
        axes_failed = None  # ranges the model does not allow: said outside the fake mode (below)
        with torch.no_grad(), attention:
            try:
                ep = torch.export.export(fake_module, fake_inputs, dynamic_shapes=dynamic_shapes, strict=False)
            except Exception as exc:
                if dynamic is None or not axis_errors.violated(exc):
                    raise
                axes_failed = exc
    if axes_failed is not None:
        raise _axis_failure(axes_failed, module, example_inputs, dynamic, guards) from axes_failed
    if changed:
        raise changed[0]
    return ep


def _axis_failure(exc: BaseException, module: torch.nn.Module, example_inputs, dynamic: Dynamic, guards: list):
    """The build error for ranges the model does not allow, with the model's line that needs
    what they break: where the export on the virtual GPU added its guards (``guards``), and where
    ``torch.export.draft_export``, tracing again on the CPU (real tensors beside the fake ones;
    only on this path), adds them."""
    dims = axis_errors.Dims()
    parameters = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for axis in dynamic.axes:  # a guard on any input's dim of an axis is one on the axis
        sources = [f"L['{parameters[i]}'].size()[{d}]" for i, d in axis.dims if i < len(parameters)]
        if sources:
            dims.one_axis(sources, axis.name)
    sites = axis_errors.recorded_sites(guards, dims) + axis_errors.guard_sites(lambda: torch.export.draft_export(
        module, tuple(example_inputs), dynamic_shapes=_dynamic_shapes(module, example_inputs, dynamic),
        strict=False), dims)
    return axis_errors.axis_failure(exc, sites, {axis.name: (axis.min, axis.max) for axis in dynamic.axes}, dims)


def _dynamic_shapes(module: torch.nn.Module, inputs, dynamic: Dynamic | None):
    """``dynamic``'s axes as export's dynamic shapes of ``inputs``: by tensor, whatever forward's
    signature (``*args`` included)."""
    if dynamic is None:
        return None
    by_input: dict[int, dict] = {}
    for axis in dynamic.axes:
        dim = torch.export.Dim(axis.name, min=axis.min, max=axis.max)
        for i, d in axis.dims:
            by_input.setdefault(i, {})[d] = dim
    shapes = torch.export.ShapesCollection()
    for i, dims in by_input.items():
        shapes[inputs[i]] = dims
    return shapes.dynamic_shapes(module, tuple(inputs))


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
