"""The text report of ``aotcombo inspect``: the package, then per arch its launches in order."""

from __future__ import annotations

from ...runtime.manifest import CAPTURE_AFTER, ITEMSIZE, MAX_GRAPHS
from .contents import level_ranks, steps, variant_order


def format_text(info: dict, arch: str | None = None) -> str:
    s = info["stats"]
    v = info["versions"]
    w = info["weights"]
    lines = [
        f"{info['name']} {info['version']}  ({info['source']['kind']} {info['source']['path']})",
        f"built by aotcombo {v.get('aotcombo', '?')} with torch {v.get('torch', '?')}, triton {v.get('triton', '?')}",
        f"archs: cubins for {', '.join(info['archs']) or 'none'}"
        + (f"; PTX for {info['ptx_arch']} and newer" if info["ptx_arch"] else
           "; no PTX (sm_90 and later: Triton's PTX is for that arch alone, as its cubin)"),
        _inputs_line(info["inputs"]),
        *_shapes_line(info["shapes"]),
        f"weights: {w['tensors'] if w['tensors'] is not None else '?'} tensors, {_mb(w['bytes'])}"
        + (f" ({', '.join(f'{d} {_mb(b)}' for d, b in w['bytes_by_dtype'].items())})"
           if len(w.get("bytes_by_dtype") or {}) > 1 else "")
        + (f" ({w['file']}: {_mb(w['file_bytes'])})" if w.get("file") else "")
        + (f"; tied: {', '.join(f'{a} = {b}' for a, b in w['tied'].items())}" if w.get("tied") else "")
        + (f"; {w['external']} given at load (--weights external)" if w.get("external") else "")
        + (f"; state, updated by forward: {', '.join(w['state'])}" if w.get("state") else ""),
        (f"launches per forward: {s.get('launches_per_forward')} = {plural(s.get('combos'), 'combo kernel')} + "
         f"{plural(s.get('extern_calls'), 'extern call')}; un-combined: {s.get('launches_uncombined')} = "
         f"{plural(s.get('kernels'), 'kernel')} + {plural(s.get('extern_calls'), 'extern call')}"),
        *(f"calls of up to {c['max_tokens']} tokens (the axes' sizes multiplied): a program of their own, kernels "
          f"of ours for its linears and attention where they qualify, {c['launches_per_forward']} launches per forward"
          for c in info.get("size_classes") or []),
        *_at_load_line(info.get("at_load") or [], info["shapes"]),
        *_memory_line(info.get("call_memory") or [], info["shapes"]),
    ]
    if info["extern_ops"]:
        lines.append("extern ops: " + ", ".join(info["extern_ops"]))
    for key in variant_order(info):
        variant = info["variants"][key]
        if arch and key != arch:
            continue
        if key == "ptx" and not arch and len(info["variants"]) > 1:
            lines += ["", (f"ptx: the {info['ptx_arch']} kernels as PTX ({_mb(variant['image_bytes'])}), JIT-compiled "
                           f"by the driver on GPUs that no cubin fits; program {variant['program']}.py")]
            continue
        early = sum(bool(c.get("pdl")) for c in variant["combos"])
        lines += ["", f"{key}: program {variant['program']}.py, {len(variant['combos'])} kernel images "
                      f"({_mb(variant['image_bytes'])})"
                      + (f"; {early} launched early, waiting on the GPU for the launch before (PDL)" if early else "")]
        lines.append(f"  {'level':>5}  {'launch':<10} {'grid':>8} {'warps':>5} {'regs':>5} {'local':>6} {'shared':>7}  "
                     "sub-kernels: kind, sizes, block sizes, programs, warps")
        combos = {c["name"]: c for c in variant["combos"]}
        rank = level_ranks(variant)
        listed = set()
        for step in steps(variant):
            level = rank.get(step.get("level"), "")
            if "extern" in step:
                lines.append(f"  {level:>5}  extern     {step['extern']}")
                continue
            c = combos.get(step["combo"])
            if c is None:
                continue
            listed.add(c["name"])
            lines.append(_combo_line(c, level))
            for sub in c["sub_kernels"]:
                lines.append(f"  {'':>5}    - {short(sub['kernel'])}" + (f": {_blocks(sub)}" if _blocks(sub) else ""))
        for c in variant["combos"]:
            if c["name"] not in listed:
                lines.append(_combo_line(c, rank.get(c["level"], "")))
    return "\n".join(lines) + "\n"


def _at_load_line(at_load: list[dict], shapes: dict) -> list[str]:
    """The work on the weights alone that runs once at load, and the GPU memory its results hold."""
    done = [a for a in at_load if a["launches"]]
    if not done:
        return []
    held = _bytes_per_shape(done, shapes)
    n = max(a["launches"] for a in done)
    return [f"at load: {n} launch{'es' if n != 1 else ''} on the weights alone "
            f"(layouts, casts, concatenations), run once; their results stay on the GPU ({held})"]


def _memory_line(memory: list[dict], shapes: dict) -> list[str]:
    """The GPU memory a call's buffers take at their peak: what a captured graph's pool holds."""
    known = [m for m in memory if m["bytes"]]
    if not known:
        return []
    each = _bytes_per_shape(known, shapes)
    dynamic = shapes.get("dynamic") or (shapes if shapes["mode"] == "dynamic" else None)
    if dynamic:
        largest = ", ".join(f"{a['name']} {a['max']}" for a in dynamic["axes"])
        return [f"memory per call: {each} at its peak at the largest sizes ({largest}), less at smaller ones; "
                "in graph mode the captured graphs share one pool of about the largest captured size's"]
    return [f"memory per call: {each} at its peak; in graph mode the captured graph holds it"]


def _bytes_per_shape(entries: list[dict], shapes: dict) -> str:
    """``entries``' bytes: one figure, or one per bucket ("batch 8: 9.7 MB, ...")."""
    if len(entries) == 1:
        return _mb(entries[0]["bytes"])
    return ", ".join(f"{shapes.get('axis', 'batch')} {e['batch']}: {_mb(e['bytes'])}" for e in entries)


def _shapes_line(shapes: dict) -> list[str]:
    if shapes["mode"] == "dynamic":
        return [f"{a['name']}: dynamic, from {a['min']} to {a['max']} ("
                + ", ".join(f"input {i} dim {d}" for i, d in a["dims"]) + ")" for a in shapes["axes"]] + [
                "grids computed per call (the shapes and launches below hold for the whole range); in graph mode "
                f"a CUDA graph per distinct size, captured at its call {CAPTURE_AFTER}, at most {MAX_GRAPHS} held, "
                "the least recently called dropped (load(capture_after=N, max_graphs=N))"]
    if shapes["mode"] == "buckets":
        axis = shapes.get("axis", "batch")
        dims = shapes.get("dims") or [(i, 0) for i in shapes.get("batched_inputs", [])]
        where = ", ".join(f"input {i} dim {d}" for i, d in dims)
        return [f"{axis}: buckets {', '.join(map(str, shapes['sizes']))} ({where})"
                + (", sizes between buckets padded to the next one" if shapes["pad"] else ", exact sizes only")
                + f"; shown below: {axis} {max(shapes['sizes'])}"] + (
                [line.replace("dynamic, from", "dynamic in every bucket, from") for line in
                 _shapes_line(shapes["dynamic"])] if shapes.get("dynamic") else [])
    return []


def _inputs_line(inputs: list[dict], show: int = 6) -> str:
    def one(i):
        return f"{i['name']} {i['dtype']}[{', '.join(map(str, i['shape']))}] stride {tuple(i['stride'])}"

    direct = sum(bool(i.get("direct")) for i in inputs)
    note = f" ({direct} of {len(inputs)} read in place in graph mode: only the package's kernels read them)" \
        if direct else ""
    return _listed(inputs, show, one) + note


def _listed(inputs: list[dict], show: int, one) -> str:
    if len(inputs) <= show:
        return "inputs: " + "; ".join(one(i) for i in inputs)
    size = 0
    for i in inputs:
        n = 1
        for d in i["shape"]:
            n *= d if isinstance(d, int) else 1
        size += n * ITEMSIZE.get(i["dtype"], 4)
    return (f"inputs: {len(inputs)} tensors, {_mb(size)}: " + "; ".join(one(i) for i in inputs[: show - 2])
            + f"; ...; {one(inputs[-1])}")


def _combo_line(c: dict, level: str) -> str:
    def show(x):
        return "?" if x is None else str(x)

    grid = c["grid"][0] if c.get("grid") else None
    return (f"  {level:>5}  {c['name']:<10} {show(grid):>8} {show(c['num_warps']):>5} {show(c['registers']):>5} "
            f"{show(c['local_bytes']):>6} {show(c['shared_bytes']):>7}  {len(c['sub_kernels'])} sub-kernel"
            f"{'s' if len(c['sub_kernels']) != 1 else ''}, {c.get('dispatch') or '?'}")


def _blocks(sub: dict) -> str:
    parts = []
    if sub.get("heuristic"):
        parts.append(sub["heuristic"])
    if sub.get("numel"):
        parts.append(" ".join(f"{k.rstrip('_')}={v}" for k, v in sub["numel"].items()))
    if sub.get("block"):
        parts.append(" ".join(f"{k}={v}" for k, v in sub["block"].items()))
    if sub.get("programs") is not None:
        parts.append(f"{sub['programs']} programs")
    if sub.get("num_warps") is not None:
        parts.append(f"{sub['num_warps']} warps")
    return ", ".join(parts)


def _mb(n) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def plural(n, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def short(kernel: str) -> str:
    """An Inductor kernel's name without its ``triton_`` prefix."""
    return kernel.removeprefix("triton_")
