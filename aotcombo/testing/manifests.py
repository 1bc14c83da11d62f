"""Small manifests and input specs for runtime tests, made through the manifest's own classes."""

from aotcombo.runtime.inputs import InputSpec
from aotcombo.runtime.manifest import Input, ComboKernel, Manifest, Specialization, Static, Stats, ArchVariant, Weights


def inputs(*dicts) -> tuple[Input, ...]:
    return tuple(Input(d["name"], d["dtype"], tuple(d["shape"]), tuple(d["stride"]), d.get("align", 16),
                       d.get("mutated", False)) for d in dicts)


def specs(*dicts) -> list[InputSpec]:
    return [InputSpec.of(i) for i in inputs(*dicts)]


def variant(program: str = "program", kernels=()) -> ArchVariant:
    return ArchVariant(program, tuple(kernels), (), Stats(len(kernels), len(kernels), 0))


def kernel(name: str, image: str, function: str, grid=(1, 1, 1), num_warps: int = 4, shared: int = 0,
           params=("ptr",), global_scratch=(0, 1), profile_scratch=(0, 1), sha256: str = "") -> ComboKernel:
    return ComboKernel(name=name, function=function, image=image, sha256=sha256, grid=tuple(grid), dynamic_grid=False,
                  num_warps=num_warps, shared=shared, params=tuple(params), global_scratch=tuple(global_scratch),
                  profile_scratch=tuple(profile_scratch), dispatch="sequential", level=0, subs=())


def manifest(name="m", archs=(90,), ptx_arch=90, ptx=True, ins=None, shapes=None, variants=None,
             tensors=(), weights_bytes: int = 0) -> Manifest:
    shapes = Static() if shapes is None else shapes
    ins = ins if ins is not None else inputs({"name": "x", "shape": [4, 8], "stride": [8, 1], "dtype": "float32"})
    if variants is None:
        variants = {f"sm_{a}": variant() for a in archs}
        if ptx:
            variants["ptx"] = variant()
    return Manifest(name=name, version="0.1.0", built_with={}, torch=("2.11", "2.14"), archs=tuple(archs),
                    ptx_arch=ptx_arch, shapes=shapes, specializations=(Specialization(None, ins, variants),),
                    weights=Weights("weights.pt", tuple(tensors), weights_bytes, ""), extern_ops=())
