"""Why a trace failed, said so a user can act: the model's line, the op, the library whose
construct it is (transformers' growing cache, MoE experts), and what to do instead."""

from __future__ import annotations

import contextlib
import re
import traceback

import torch

from ...errors import UnsupportedModelError
from ..inputs.signature import misplaced_input
from ..inputs.usercode import library_where, where
from .axis_errors import axis_failure

def loose_tensors(module: torch.nn.Module) -> list[str]:
    """Tensor attributes that are neither parameters nor buffers (export lifts them as constants)."""
    return [f"{path}.{key}" if path else key for path, mod in module.named_modules()
            for key, value in vars(mod).items() if isinstance(value, torch.Tensor)]


def token_picking_experts(module: torch.nn.Module) -> str:
    """The class of transformers' MoE experts modules (``@use_experts_implementation``) in
    ``module`` that run its "eager" implementation (tokens picked per expert: data-dependent
    shapes), or ""."""
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if hasattr(sub, "_is_expert_parallel") and hasattr(sub, "has_gate") and \
                getattr(config, "_experts_implementation", None) in ("eager", None):
            return type(sub).__name__
    return ""


def growing_cache(module: torch.nn.Module, exc: BaseException) -> str:
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


def inductor_failure(exc: BaseException, arch: int) -> UnsupportedModelError:
    """The build error for an Inductor failure: the op and the model's line when Inductor
    failed lowering one node, else the stage that failed; never an empty message."""
    failed = exc
    while failed is not None and not hasattr(failed, "_aotcombo_node"):
        failed = failed.__cause__ or failed.__context__
    if failed is not None:
        node = failed._aotcombo_node
        op = target_name(node.target)
        return UnsupportedModelError(
            f"TorchInductor cannot compile {op}{node_where(node) or where(exc)} for sm_{arch}: {summary(failed)}",
            fix=f"replace {op} in the model (or compute it another way), or build for another arch",
        )
    return UnsupportedModelError(
        f"TorchInductor cannot generate code for the model for sm_{arch}{where(exc)} "
        f"(after lowering every op, while scheduling or writing the wrapper): {summary(exc)}",
        fix="this is a gap in aotcombo's support of Inductor: report it with the model; "
        "building for another arch or changing the construct named in the error may avoid it",
    )


def target_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._schema.name.split('::')[-1]}.{target._overloadname}" \
            if target.namespace == "aten" else str(target)
    return getattr(target, "__name__", str(target))


def node_where(node) -> str:
    """`` at model.py:12 (`code`)`` from an FX node's stack trace (its innermost frame)."""
    lines = (node.meta.get("stack_trace") or "").strip().splitlines()
    where = ""
    for i, line in enumerate(lines):
        m = re.match(r'\s*File "(.+)", line (\d+)', line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File ") else ""
            where = f" at {m.group(1).rsplit('/', 1)[-1]}:{m.group(2)}" + (f" (`{code}`)" if code else "")
    return where


def located(exc: UnsupportedModelError, where: str) -> UnsupportedModelError:
    """``exc`` with `` at model.py:12 (`code`)`` appended, unless it names a place already."""
    if not where or " at " in exc.message:
        return exc
    located = type(exc)(f"{exc.message}{where}", exc.fix)
    located.detail = exc.detail
    return located



@contextlib.contextmanager
def quiet_logs():
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


def summary(exc: BaseException) -> str:
    """The first informative line of an exception, without torch's boilerplate."""
    while type(exc).__name__ in ("InductorError", "BackendCompilerFailed") and exc.__cause__ is not None:
        exc = exc.__cause__
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    # Inductor wraps errors as "NotImplementedError: " + the message on the next lines.
    while len(lines) > 1 and re.fullmatch(r"[\w.]+:", lines[0]):
        lines = lines[1:]
    head = lines[0] if lines else "(no message)"
    return f"{type(exc).__name__}: {head[:300]}"


# transformers' float16 overflow guard (BART, Marian, mBART, Pegasus, ...: `if hidden_states.dtype ==
# torch.float16 and not torch.isfinite(hidden_states).all(): clamp`), a branch on the activations' values
FLOAT16_GUARD = ("the line branches on whether float16 activations are all finite (an overflow guard that clamps "
                 "them): a data-dependent branch torch.export cannot trace. It runs only in float16: build the "
                 "model in bfloat16 or float32; or, in code of your own, make the branch one op: "
                 "x = torch.where(torch.isfinite(x).all(), x, x.clamp(-m, m))")


def _float16_guard(line: str) -> bool:
    return "float16" in line and re.search(r"\bis(finite|inf|nan)\b", line) is not None


def export_failure(module: torch.nn.Module, exc: BaseException, inputs: int = 0) -> UnsupportedModelError:
    """The build error for a model ``torch.export`` cannot trace: the model's line, and the fix
    for the constructs we know (transformers' token-picking MoE experts and growing cache; an
    example input passed by position to a parameter that takes no tensor)."""
    axes = axis_failure(exc)
    if axes is not None:
        return axes
    misplaced = misplaced_input(module, exc, inputs)
    if misplaced:
        return UnsupportedModelError(
            f"torch.export cannot trace the model{where(exc) or library_where(exc)}: {summary(exc)}", fix=misplaced)
    loose = loose_tensors(module)
    experts = token_picking_experts(module)
    cache = growing_cache(module, exc)
    line = where(exc) or library_where(exc)
    return UnsupportedModelError(
        f"torch.export cannot trace the model{line}: {summary(exc)}",
        fix=(FLOAT16_GUARD if _float16_guard(line) else
             f"the model's MoE experts ({experts}) run transformers' experts_implementation=\"eager\", "
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
    )
