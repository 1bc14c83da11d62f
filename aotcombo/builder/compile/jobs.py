"""A variant's combo kernels as compile jobs, each distinct kernel once: a combo identical to
one queued already but for its name (the same layer again, deeper in the model) takes that
one's binary."""

from __future__ import annotations

import re

from ...errors import BuildError
from ..codegen.combo import combo_signature
from ..package.manifest import VariantBuild
from .scheduler import Scheduler
from .triton_job import Binary, Job

# The most shared memory a block may take, per arch (CUDA's programming guide, compute capabilities).
MAX_SHARED_BYTES = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 120: 101376}


def label(variant: VariantBuild, combo: str) -> str:
    """A kernel's compile job: ``sm_90/combo_3``, ``batch8/sm_90/combo_3`` or (a size class)
    ``tokens8/sm_90/combo_3``."""
    name = f"sm_{variant.arch}/{combo}"
    if variant.max_tokens is not None:
        name = f"tokens{variant.max_tokens}/{name}"
    return name if variant.batch is None else f"batch{variant.batch}/{name}"


class Jobs:
    """The compile jobs of a build, de-duplicated, on a ``Scheduler``."""

    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler
        self.first_of: dict = {}  # a combo's source with its name taken out (and its compile options) -> its label
        self.copies: dict[str, str] = {}  # label -> the label of the identical combo compiled

    def add(self, variant: VariantBuild) -> None:
        for combo in variant.plan.combos:
            signature, aligned = combo_signature(combo)
            name, source = label(variant, combo.name), variant.sources[combo.name]
            same = (variant.arch, re.sub(rf"\b{combo.name}\b", "COMBO", source), tuple(signature.items()),
                    tuple(aligned), combo.num_warps, combo.num_stages)
            if same in self.first_of:
                self.copies[name] = self.first_of[same]
                continue
            self.first_of[same] = name
            self.scheduler.add(Job(name, source, combo.name, tuple(signature.items()), tuple(aligned),
                                   variant.arch, combo.num_warps, combo.num_stages))

    def finish(self) -> dict[str, Binary]:
        """Every job's binary by label, copies included; a kernel that asks for more shared memory
        than its arch has is a build error here, not a failed load on the GPU."""
        binaries = self.scheduler.finish()
        binaries.update({name: binaries[first] for name, first in self.copies.items()})
        for name, binary in binaries.items():
            limit = MAX_SHARED_BYTES.get(binary.arch)
            if limit is not None and binary.shared > limit:
                raise BuildError(f"kernel {name} takes {binary.shared} bytes of shared memory; sm_{binary.arch} "
                                 f"has {limit}", fix="report it with the model: aotcombo's plan should have "
                                 "split that combo kernel")
        return binaries

    def describe(self, variants: list[VariantBuild], archs, axis: str = "batch") -> str:
        """What the compile stage compiles, for its progress line (``axis``: the buckets' axis)."""
        total = sum(len(v.plan.combos) for v in variants)
        copies, scheduler = len(self.copies), self.scheduler
        what = f"{total} kernels for {', '.join(f'sm_{a}' for a in archs)}"
        batches = len({v.batch for v in variants})
        if batches > 1:
            what += f" x {batches} {axis} sizes"
        if copies:
            what += f" ({total - copies} distinct)"
        if scheduler.total < total - copies:
            what += f", {total - copies - scheduler.total} from the build cache"
        return what
