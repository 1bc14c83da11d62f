"""What a package holds, as plain data: everything ``aotcombo inspect`` reports, and what
``--json`` prints; and how a report walks it (variants in order, launches in order, levels)."""

from __future__ import annotations

import math
from pathlib import Path

from ...errors import InspectError
from ...runtime.manifest import ITEMSIZE, Manifest, ManifestError
from .source import locate


def inspect_package(target: str | Path) -> dict:
    """Everything ``aotcombo inspect`` reports, as plain data."""
    import dataclasses

    source = locate(target)
    try:
        manifest = Manifest.from_json(source.read("manifest.json"))
    except (OSError, ManifestError) as exc:
        raise InspectError(f"cannot read manifest.json of {source.where}: {exc}", fix="rebuild the package") from exc
    shape = manifest.specialization()
    variants = {}
    for key, variant in shape.variants.items():
        variants[key] = {
            "program": variant.program,
            "stats": dataclasses.asdict(variant.stats),
            "image_bytes": sum(source.size(k.image) or 0 for k in variant.kernels),
            "combos": [
                {
                    "name": k.name, "level": k.level, "grid": list(k.grid), "num_warps": k.num_warps,
                    "registers": k.registers, "local_bytes": k.local_bytes, "shared_bytes": k.shared,
                    "dispatch": k.dispatch, "image": k.image, "pdl": k.pdl,
                    "sub_kernels": [dataclasses.asdict(sub) for sub in k.subs],
                }
                for k in variant.kernels
            ],
            "schedule": [{step.kind: step.name, "level": step.level} for step in variant.schedule],
        }
    stats = _lowest(manifest, shape).stats
    w = manifest.weights
    shapes = [s for s in manifest.specializations if s.max_tokens is None] or manifest.specializations[-1:]
    return {
        "source": {"kind": source.kind, "path": source.where},
        "name": manifest.name,
        "version": manifest.version,
        "versions": manifest.built_with,
        "archs": [f"sm_{a}" for a in manifest.archs],
        "ptx_arch": f"sm_{manifest.ptx_arch}" if "ptx" in shape.variants else None,
        "inputs": [dataclasses.asdict(i) for i in manifest.inputs],
        "weights": {"file": w.file, "file_bytes": w.file_bytes, "tensors": len(w.tensors), "bytes": w.bytes,
                    "bytes_by_dtype": _bytes_by_dtype(w.tensors),
                    "external": len(w.external), "state": list(w.state),
                    "tied": {t.name: t.same_as for t in w.tensors if t.same_as is not None}},
        "extern_ops": list(manifest.extern_ops),
        "stats": {**dataclasses.asdict(stats), "launches_per_forward": stats.launches_per_forward,
                  "launches_uncombined": stats.launches_uncombined},
        "variants": variants,
        "shapes": dataclasses.asdict(manifest.shapes),
        # per input shape: the launches its prepare runs at load and the bytes their results hold
        "at_load": [{"batch": s.batch, "launches": _lowest(manifest, s).stats.load_launches,
                     "bytes": _lowest(manifest, s).stats.load_bytes} for s in shapes],
        # per input shape: the bytes a call's buffers hold at their peak (a captured graph's pool)
        "call_memory": [{"batch": s.batch, "bytes": _lowest(manifest, s).stats.peak_bytes} for s in shapes],
        # dynamic axes: the size classes with a program of their own, its launches per forward
        "size_classes": [{"max_tokens": s.max_tokens,
                          "launches_per_forward": _lowest(manifest, s).stats.launches_per_forward}
                         for s in manifest.specializations if s.max_tokens is not None and s not in shapes],
    }


def _lowest(manifest, shape):
    """The variant of the lowest arch (its PTX's, where the package has PTX): what the counts show."""
    cubins = [f"sm_{a}" for a in sorted(manifest.archs) if f"sm_{a}" in shape.variants]
    return shape.variants[cubins[0]] if cubins else shape.variants["ptx"]


def _bytes_by_dtype(tensors) -> dict[str, int]:
    """The weights' bytes per dtype, the most first (a tied tensor once): a quantized model's
    int8 or uint8 bytes and its scales."""
    total: dict[str, int] = {}
    for t in tensors:
        if t.same_as is None:
            total[t.dtype] = total.get(t.dtype, 0) + ITEMSIZE.get(t.dtype, 1) * math.prod(t.shape)
    return dict(sorted(total.items(), key=lambda item: -item[1]))


def variant_order(info: dict) -> list[str]:
    """The variants as reports list them: the cubin archs, lowest first, then the rest (ptx)."""
    keys = list(info["variants"])
    cubins = sorted((k for k in keys if k.startswith("sm_")), key=lambda k: int(k[3:]) if k[3:].isdigit() else 0)
    return cubins + [k for k in keys if k not in cubins]


def steps(variant: dict) -> list[dict]:
    """A variant's launches in order: ``{"combo": name, "level": n}`` or ``{"extern": op, "level": n}``."""
    return variant["schedule"]


def level_ranks(variant: dict) -> dict:
    """Dependency levels renumbered 0, 1, 2... over the launches (the traced graph's
    levels also count allocations and views)."""
    levels = sorted({s.get("level") for s in steps(variant) if s.get("level") is not None})
    return {lv: str(i) for i, lv in enumerate(levels)}
