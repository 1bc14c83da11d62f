"""Capture of Inductor's output: Inductor is asked for its FX wrapper (``config.fx_wrapper``),
whose converter turns wrapper lines (allocations, views, extern calls, fallbacks) into an FX
graph; we subclass it only where it would compile Triton kernels, recording each kernel's
source and a marker call instead, and stop the compile before Inductor loads any module."""

from __future__ import annotations

import re
from unittest import mock

from ...errors import UnsupportedModelError
from .. import graph as g
from .wrapper_text import structured_lines


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
            if is_int_expr(arg):
                return int(arg)
            if isinstance(arg, sympy.Expr):
                return self._generate_sym_node(arg)
            if isinstance(arg, str):
                return self.buffer_to_node[arg]
            return arg

    return RecordingConverter


def is_int_expr(value) -> bool:
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
    if is_int_expr(arg) or isinstance(arg, int):
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



def _install_capture():
    from torch._inductor.codegen import wrapper_fxir

    converter_cls = _make_converter_class()

    def generate(self, is_inference):
        self.run_wrapper_ir_passes(is_inference)
        converter = converter_cls(
            lines=structured_lines(self.lines),
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
            # One aligned copy of an attention mask every layer reads, not one per layer
            # (attention_masks.py gives those calls one mask node).
            "cache_sdpa_constraint": True,
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


# Rows of an inner reduction one block each (a persistent reduction, the row held in registers)
# up to this many elements, where Inductor stops at 1024 and loops, re-reading the row for each
# pass. Above INNER_REDUCTION_BLOCK (plan/blocks.py: a looped row of up to 2048 is one block a
# pass already): H200, Llama 3.2 1B prefill of 512 tokens in float8 (float8_bench, two runs), the
# SiLU-gate-up product quantized per row (8192 elements, two passes) made one: the call 2.095-
# 2.104 -> 2.027-2.052 ms; rows of 2048 made one block too cost bf16's call 1 % (2.557-2.570 ->
# 2.578-2.602), so they stay Inductor's.
# Tried, not kept: rows of 1025-2048 made one block where the kernel stores float8 (RMSNorm and the
# attention output quantized per row): H200, same bench, A/B twice, float8 1.923 / 1.932 -> 1.933 /
# 1.933 ms (2026-11-29).
PERSISTENT_ROWS = (2048, 8192)  # (above, up to) elements


def _persistent_rows():
    """Inner reductions of PERSISTENT_ROWS elements (sizes known at build time) persistent."""
    from torch._inductor.choices import InductorChoices
    from torch._inductor.runtime.hints import ReductionHint
    from torch._inductor.virtualized import V

    original = InductorChoices.should_use_persistent_reduction
    above, most = PERSISTENT_ROWS

    def should(features, cooperative_reduction):
        numel, sizes = features.reduction_numel, V.graph.sizevars
        if (not cooperative_reduction and features.get_reduction_hint() == ReductionHint.INNER
                and features.strict_sum_rblock() is None  # (deterministic sums keep their blocks)
                and sizes.statically_known_gt(numel, above) and sizes.statically_known_leq(numel, most)):
            return True
        return original(features, cooperative_reduction)

    return mock.patch.object(InductorChoices, "should_use_persistent_reduction", staticmethod(should))


def run_inductor(gm, fake_inputs, combo_kernels: bool = False, dynamic: bool = False):
    from . import activations, group_norm
    from .direct import compile_without_retrace
    from .layout_guards import padded_attention_masks

    import logging
    import tempfile

    # Inductor logs a warning when our capture unwinds its cache context;
    # its scratch files go to a folder of ours that is removed afterwards.
    quiet = mock.patch.object(logging.getLogger("torch._inductor.utils"), "level", logging.ERROR)
    try:
        with tempfile.TemporaryDirectory(prefix="aotcombo-inductor-") as cache, quiet, mock.patch.dict(
            "os.environ", {"TORCHINDUCTOR_CACHE_DIR": cache}
        ), _inductor_config(combo_kernels, dynamic), _install_capture(), _note_failing_node(), _persistent_rows(), \
                padded_attention_masks():
            # Inductor's own GELU and GroupNorm where its launches are counted (torch.compile's kernels)
            compile_without_retrace(gm, fake_inputs,
                                    {} if combo_kernels else {**activations.TABLE, **group_norm.TABLE})
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


