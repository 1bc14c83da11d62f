"""The loop of a quantized GEMV (one row of x against weight-only quantized bytes, ``quant.py``):
the lines ``templates/fused_linear.py.j2`` puts in its ``qgemv`` block.

W's bytes are read as [BLOCK_N, CHUNKS, CHUNK] tiles: each thread's CHUNK (16) contiguous bytes
one vector load, each byte once. Every other tensor of the loop (x, the norm's weight) is loaded
in that same shape, its pointers broadcast over the rows, so that Triton gives all the loads
the bytes' layout (``Coalesce`` takes the widest vector among the loads of one shape and order)
and nothing is exchanged between threads inside the loop (x's rows are the same registers:
loaded and converted once per thread). A chunk's products are summed in its thread, then
multiplied by the chunk's scale (a group holds whole chunks: one scale load per chunk) and
added to a per-chunk accumulator, summed over k once after the loop. Where a k step holds a chunk
a thread (``ROWS``), a program's ``ROW_TILE`` rows are taken one at a time, each a [1, CHUNKS,
CHUNK] tile of a chunk a thread (16 bytes, or 8 where a k step holds too few), x's work (its
loads, the norm, the carrier) done once for all of them and each row's chunk sums added to its row
of the accumulator: x's work per weight a row's where it was a tile's (the rows of [BLOCK_N, ...]
tiles are other threads' or loaded again). H200, 2026-12-02 (quant_gemv_bench.py, us, rows of 4
then 8 a row at a time): int4 qkv 4.87 -> 3.46, o 3.65 -> 3.01, gate/up 13.59 -> 10.05, down 7.02
-> 5.08, LM head 78.7 -> 51.9; the 1B decode step 0.598 -> 0.523 ms (quantized_llm_bench.py).
Scaled per output channel (int8), a row's chunk sums are its own too (the carrier, "unit", as per
group) and the scale multiplies after the loop; rows of 4: the int8 step 0.631 -> 0.594 ms (rows
of 8: 0.652), H200, 2026-12-03, one run. int4 in rows of 4 too, though its GEMVs alone were faster
in 8: the step 0.524 -> 0.502 ms (H200, 2026-12-03, one run, position 1000, medians of 200).

int8: one weight a byte, ``x`` at the byte's k. int4: two a byte (k = 2 kb, 2 kb + 1; the low
nibble first unless ``high_first``); a 16-bit x is loaded as 32-bit words, a pair of x a word,
split by bit operations (no interleave), and the byte ``b = lo + 16 hi`` is used whole:
``lo x_lo + hi x_hi = b x_lo + hi (x_hi - 16 x_lo)``, so a byte costs one float of itself and
one of its high nibble. Integers become floats by placing their bits into a power of two's and
subtracting it (``recipe.QUANT_CONVERT``: "perm", by byte permutes; "bits", or'ed), or, scaled
per group ("unit", the default), as 1 + byte / 2^15 with the ones taken off a chunk at a time
through a sum of x (``carrier``). A zero point, constant or tensor, is applied per chunk through
the chunk's sum of x (with a scale per output channel and no tensor, the constant is folded into
that subtraction; with "unit", a constant one into the carrier).
"""

from __future__ import annotations

import dataclasses

from ....runtime.manifest import ITEMSIZE
from ... import graph as g
from . import recipe as recipes
from .recipe import Recipe, Tiles

CHUNK = 16  # bytes a thread loads at once (a 128-bit load)
ROWS = True  # the tile's rows one at a time, x's work (loads, norm, splits) once for all of them
ROW_TILE = 4  # rows a program, taken one at a time (8 measured slower in the step, int8 and int4)
WIDE = (65536, 16, 2)  # from this many output rows (an LM head's): rows a program, int4's warps
MAGIC = {23: ("0x4B000000", 8388608.0), 19: ("0x49000000", 524288.0)}  # 2^e: its bits, its value


def as_float(value: str, offset: int) -> str:
    """``value`` (int32; plus ``offset``, in 0..255) as float32 without the conversion instruction
    (``recipe.QUANT_CONVERT`` "bits"): or'ed into the bits of 2^23, which is then subtracted."""
    return _minus(f"({value}) + {offset}" if offset else f"({value})", 23, float(offset))


def chunk_bytes(r: Recipe, t: Tiles, threads: int = 1) -> int | None:
    """The bytes of a chunk: up to ``CHUNK``, no more than a k step holds (a ``threads``-th of
    it, where that is at least 8), each chunk inside one group of the scale; None where no chunk
    fits a group (int4 with an odd group)."""
    per_byte, step = 8 // r.quant.bits, t.block_k * r.quant.bits // 8
    whole = r.quant.group == r.k  # one group: a chunk past k is masked
    size = min(CHUNK, step, max(8, step // threads))
    while size >= 1 and not whole and r.quant.group % (size * per_byte):
        size //= 2
    return size if size >= 1 else None


def _words(spec: g.TensorSpec) -> bool:
    """A 16-bit tensor whose pairs along its last dim are aligned 32-bit words."""
    return (ITEMSIZE[spec.dtype] == 2 and spec.stride[-1] == 1 and spec.storage_offset % 2 == 0
            and all(s % 2 == 0 for s in spec.stride[:-1]))


def _pairs(name: str, start: str, spec: g.TensorSpec, step: int, out: tuple[str, str]) -> list[str]:
    """Lines loading the elements at k = 2 kb and 2 kb + 1 (``step`` apart along k) of a row
    starting at ``start`` into the float32 ``out`` (even, odd): 32-bit words split by bit
    operations where the pairs are aligned words."""
    even, odd = out
    if step != 1 or not _words(spec):
        return [f"{even} = tl.load({start} + (2 * kb) * {step} + rows, mask=mask_b, other=0.0).to(tl.float32)",
                f"{odd} = tl.load({start} + (2 * kb + 1) * {step} + rows, mask=mask_b, other=0.0).to(tl.float32)"]
    lines = [f"{name}_w = tl.load(({start}).to(tl.pointer_type(tl.int32)) + kb + rows, mask=mask_b, other=0)"]
    if spec.dtype == "bfloat16":  # a bfloat16 is the top half of its float32
        return lines + [f"{even} = ({name}_w << 16).to(tl.float32, bitcast=True)",
                        f"{odd} = ({name}_w & -65536).to(tl.float32, bitcast=True)"]
    return lines + [f"{even} = ({name}_w & 65535).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)",
                    f"{odd} = ({name}_w >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)"]


def _normed(values: list[str], r: Recipe, norm_lines, late: bool) -> list[str]:
    """The norm applied to each of ``values``, in float32: not rounded to ``norm_cast`` and the
    operands' dtype as eager rounds it (a conversion a value each, at an eighth of the float rate;
    the products nearer the exact ones). ``late``: the squares summed here, the norm's weight
    applied, and 1 / rms left to multiply the sums after the loop (``rstd_after``)."""
    lines = []
    if late:
        lines.append("squares += " + " + ".join(f"{v} * {v}" for v in values))
    for i, v in enumerate(values):
        if r.norm == "layer":
            lines.append(f"{v} = ({v} - mean[:, None, None]) * rstd[:, None, None]")
        elif not late:
            lines.append(f"{v} = {v} * rstd[:, None, None]")
        lines += norm_lines(v, i)
    return lines


def rstd_after(r: Recipe) -> bool:
    """Whether an RMS norm's 1 / rms multiplies the loop's sums instead of x: every product is
    linear in x, so sum w (x g / rms) = (sum w x g) / rms. Its squares are then summed in the loop
    from the x it loads (x loaded once a step, or, but for rows one at a time, once for each of the
    tile's rows: their sum divided by them), not in a pass over x before it, and W's loads wait for
    no statistics. Not a layer norm: its mean and bias are not linear so."""
    return recipes.RSTD_AFTER and r.norm == "rms"


def _x_lines(r: Recipe, specs: dict, per_chunk: bool, late: bool = False) -> list[str]:
    """x at each byte's k: ``xa`` (int8) or ``xl``/``xh`` (int4: at the low / high nibble's k),
    float32, the norm applied (``late``: but for 1 / rms, ``rstd_after``); int4's ``xd = xh - 16 xl``
    ("unit": xh / 16 - xl); ``xs``, a chunk's sum, where a zero point is applied per chunk; "unit"'s
    carrier (``carrier``): ``xk``, a chunk's."""
    x, ones = specs["x"], unit(r, specs["w"], per_chunk)
    x_stride = x.stride
    row = f"x_ptr + pid_m.to(tl.int64) * {x_stride[0]}"
    if r.quant.bits == 8:
        lines = [f"xa = tl.load({row} + kb * {x_stride[1]} + rows, mask=mask_b, other=0.0).to(tl.float32)"]

        def norm_lines(v, _):
            out = []
            for param, op in (("norm_weight_ptr", "*"), ("norm_bias_ptr", "+")):
                if param in specs:
                    out.append(f"{v} = {v} {op} tl.load({param} + kb * {specs[param].stride[-1]} + rows, mask=mask_b, "
                               "other=0.0).to(tl.float32)")
            return out
        values = ["xa"]
    else:
        lines = _pairs("x", row, x, x_stride[1], ("xe", "xo"))
        loaded = {}
        for param in ("norm_weight_ptr", "norm_bias_ptr"):
            if param in specs:
                tag = param.split("_")[1]
                lines += _pairs(tag, param, specs[param], specs[param].stride[-1], (f"{tag}_e", f"{tag}_o"))
                loaded[param] = (f"{tag}_e", f"{tag}_o")

        def norm_lines(v, i):
            return [f"{v} = {v} {op} {loaded[param][i]}" for param, op in (("norm_weight_ptr", "*"),
                                                                         ("norm_bias_ptr", "+")) if param in loaded]
        values = ["xe", "xo"]
    if r.norm:
        lines += _normed(values, r, norm_lines, late)
    if r.quant.bits == 4:
        low, high = ("xo", "xe") if r.quant.high_first else ("xe", "xo")
        lines += [f"xl, xh = {low}, {high}", "xd = xh * 0.0625 - xl" if ones else "xd = xh - 16.0 * xl"]
    if per_chunk and (r.quant.zero != "none" or (r.quant.zero_value and not ones)):
        lines.append("xs = tl.sum(" + ("xa" if r.quant.bits == 8 else "xl + xh") + ", 2, keep_dims=True)")
    if ones:  # the carrier, a chunk's
        expr, factor = carrier(r, specs["w"])
        lines.append(f"xk = tl.sum({expr}, 2, keep_dims=True)" + (f" * {factor!r}" if factor != 1.0 else ""))
    return lines


def unit(r: Recipe, q: g.TensorSpec, per_chunk: bool) -> bool:
    """Whether the loop takes its bytes as 1 + byte / 2^15 (``recipe.QUANT_CONVERT`` "unit": one
    byte permute a weight and no subtraction, the ones taken off a chunk at a time: summed a chunk
    at a time (``per_chunk``), where "perm" would permute; summed
    per element, "perm", whose sums would carry them a row each)."""
    return recipes.QUANT_CONVERT == "unit" and (r.quant.bits == 8 or q.dtype == "uint8") and per_chunk


def carrier(r: Recipe, q: g.TensorSpec) -> tuple[str, float]:
    """What "unit" floats leave in a sum besides the products (x-only): the sum of ``expr`` over
    the same k times ``factor``. With int8 bytes u = q + ``offset`` (128 for a signed q) and ``zv``,
    sum x (q - zv) = 2^15 sum x (1 + u / 2^15) - (2^15 + offset + zv) sum x. With int4 (xd = xh /
    16 - xl), sum xl (lo - zv) + xh (hi - zv) = 2^15 sum xl (1 + b / 2^15) + xd (1 + 16 hi / 2^15)
    - sum (2^11 + zv) xh + zv xl."""
    zv = r.quant.zero_value
    if r.quant.bits == 8:
        return "xa", 2.0 ** 15 + (128.0 if q.dtype == "int8" else 0.0) + zv
    return f"{2.0 ** 11 + zv!r} * xh" + (f" + {float(zv)!r} * xl" if zv else ""), 1.0


def by_bits() -> bool:
    """Whether integers become floats through a power of two's bits (``recipe.QUANT_CONVERT``
    "bits" or "perm"; the tensor-core tiles, ``lowering``, or them where this loop permutes)."""
    return recipes.QUANT_CONVERT in ("bits", "perm", "unit")


def permute_asm(signed: bool, high: bool, unit: bool = False) -> str:
    """PTX making four bytes (one 32-bit register, ``pack=4``) four float32 2^23 + byte (``signed``:
    byte ^ 0x80, int8's value + 128), one ``prmt`` a byte placing it in the low byte of 2^23's bits
    (``recipe.QUANT_CONVERT`` "perm"); ``high``: also four 2^19 + its high nibble (the byte & 0xF0
    placed likewise in 2^19's bits). ``unit`` ("unit"): each byte placed in bits 8-15 of 1.0's,
    1 + byte / 2^15 (the high nibble's byte & 0xF0 likewise). tools/interpret.py computes these with numpy."""
    lines = ["{ .reg .b32 t;", "xor.b32 t, $%d, 0x80808080;" if signed else "mov.b32 t, $%d;"]
    whole, nibble, select = ("0x3F800000", "0x3F800000", "0x76{}4") if unit else ("0x4B000000", "0x49000000",
                                                                                  "0x754{}")
    lines += [f"prmt.b32 ${i}, t, {whole}, {select.format(i)};" for i in range(4)]
    if high:
        lines += ["and.b32 t, t, 0xF0F0F0F0;"] + [f"prmt.b32 ${4 + i}, t, {nibble}, {select.format(i)};"
                                                  for i in range(4)]
    return " ".join(lines).replace("%d", str(8 if high else 4)) + " }"


def _permuted(signed: bool, high: bool, unit: bool = False) -> str:
    """``w``'s bytes as floats by byte permutes (``permute_asm``): one tensor, or (whole, high)."""
    outputs = 8 if high else 4
    dtype = "(tl.float32, tl.float32)" if high else "tl.float32"
    constraints = ",".join(["=r"] * outputs) + ",r"
    return (f"tl.inline_asm_elementwise({permute_asm(signed, high, unit)!r}, {constraints!r}, [w], "
            f"dtype={dtype}, is_pure=True, pack=4)")


def _less(value: str, power: float, constant: float) -> str:
    """``value`` less ``power`` and ``constant``, one subtraction where ``constant`` is whole."""
    whole = float(constant).is_integer() and abs(constant) < 2 ** 16
    return f"{value} - {power + (constant if whole else 0.0)!r}" + ("" if whole else f" - {float(constant)!r}")


def _minus(value: str, magic: int, constant: float, op: str = "|") -> str:
    """``value`` (int32, an integer in the low bits of 2^``magic``'s) as float32 less ``constant``:
    ``op``'ed into 2^``magic``'s bits, which is then subtracted, with ``constant`` if whole."""
    bits, power = MAGIC[magic]
    return _less(f"(({value}) {op} {bits}).to(tl.float32, bitcast=True)", power, constant)


def _dequantized(r: Recipe, q: g.TensorSpec, zv: float, per_chunk: bool) -> tuple[list[str], list[tuple[str, str]]]:
    """Lines making the float32 values of the loaded bytes ``w`` (less ``zv``), and the (weight,
    x) pairs whose products sum to the chunk's: int8 ``w`` by ``xa``; int4 the byte ``w`` by ``xl``
    and its high nibble ``hi`` by ``xd`` (``w`` less 17 ``zv``: (lo - zv) + 16 (hi - zv))."""
    perm = recipes.QUANT_CONVERT in ("perm", "unit") and (r.quant.bits == 8 or q.dtype == "uint8")
    if unit(r, q, per_chunk):  # 1 + byte / 2^15: the ones and zv taken off per chunk through x's sums (carrier)
        if r.quant.bits == 8:
            return [f"w = {_permuted(q.dtype == 'int8', False, True)}"], [("w", "xa")]
        return [f"w, hi = {_permuted(False, True, True)}"], [("w", "xl"), ("hi", "xd")]
    if r.quant.bits == 8:
        if perm:
            signed = q.dtype == "int8"
            line = _less(_permuted(signed, False), MAGIC[23][1], (128.0 if signed else 0.0) + zv)
        elif not by_bits():
            line = "w.to(tl.float32)" + (f" - {float(zv)!r}" if zv else "")
        elif q.dtype == "int8":  # its byte ^ 0x80 is w + 128, in 0..255 (the two xors one: with 0x4B000080)
            line = _minus("w.to(tl.uint8, bitcast=True).to(tl.int32) ^ 128", 23, 128.0 + zv, "^")
        else:
            line = _minus("w.to(tl.int32)", 23, zv)
        return [f"w = {line}"], [("w", "xa")]
    if perm:
        lines = [f"w, hi = {_permuted(False, True)}", "hi = " + _less("hi", MAGIC[19][1], zv),
                 "w = " + _less("w", MAGIC[23][1], 17.0 * zv)]
    elif by_bits():
        lines = ["w = w.to(tl.int32)", "hi = " + _minus("w & 240", 19, zv), "w = " + _minus("w", 23, 17.0 * zv)]
    else:
        lines = ["w = w.to(tl.int32)", "hi = (w >> 4).to(tl.float32)" + (f" - {float(zv)!r}" if zv else ""),
                 "w = w.to(tl.float32)" + (f" - {17.0 * zv!r}" if zv else "")]
    return lines, [("w", "xl"), ("hi", "xd")]


def _chained(pairs: list[tuple[str, str]], chunk: int, split: set) -> list[str]:
    """``p``, the sum over a chunk (the last dim, in one thread) of the products of ``pairs``, one
    product added at a time (fused multiply-adds; ``tl.sum`` adds a tree of products): each tensor
    split into its ``chunk`` [BLOCK_N, CHUNKS, 1] parts (``split``: x's, split for an earlier product)."""
    lines, parts = [], {}
    for name in dict.fromkeys(t for pair in pairs for t in pair):
        level, size = [name], chunk
        while size > 1:
            size //= 2
            if name not in split:
                lines += [f"{t}0, {t}1 = tl.split(tl.reshape({t}, [TILE, CHUNKS, {size}, 2]))" for t in level]
            level = [f"{t}{i}" for t in level for i in (0, 1)]
        parts[name] = level
        if name.startswith("x"):
            split.add(name)
    terms = [f"{parts[a][i]} * {parts[b][i]}" for i in range(chunk) for a, b in pairs]
    return lines + [f"p = {terms[0]}"] + [f"p += {t}" for t in terms[1:]]


def _product_lines(r: Recipe, q: g.TensorSpec, half: int, product: str, chunk: int, split: set,
                   rows: bool = False) -> list[str]:
    """One product's W tile loaded, dequantized and summed: per chunk, scaled, into
    ``{product}_c`` (a scale per output channel is left to after the loop: summed per chunk
    where the rows are taken one at a time, else per element)."""
    quant = r.quant
    per_channel = quant.per_channel(r.k)
    per_chunk = rows or not per_channel
    start = f"{half * r.n * q.stride[0]} + " if half else ""
    rn, mask_n = ("row", "mask_row") if rows else ("rn3", "mask_n3")
    lines = [f"w = tl.load(w_ptr + {start}{rn} * {q.stride[0]} + kb * {q.stride[1]}, mask={mask_n} & mask_b, other=0)"]
    dequantized, pairs = _dequantized(r, q, 0.0 if per_chunk else quant.zero_value, per_chunk)
    lines += dequantized
    if not per_chunk:  # summed per element across the loop: the scale multiplies the sum
        return lines + [f"{product}_c += " + " + ".join(f"{a} * {b}" for a, b in pairs)]
    lines += _chained(pairs, chunk, split)
    ones = unit(r, q, per_chunk)
    if ones:  # the chunk's products less the carrier (its constant zero point in it)
        lines.append("p = p * 32768.0 - xk")

    def into(expr: str) -> str:  # rows: one row's products into its row of the accumulator
        return f"{product}_c += " + (f"tl.where(ri == i, {expr}, 0.0)" if rows else expr)
    zero = [f"{float(quant.zero_value)!r}"] if quant.zero_value and not ones else []
    if per_channel:  # the scale after the loop
        return lines + ([f"p -= {zero[0]} * xs"] if zero else []) + [into("p")]
    groups = r.k // quant.group
    index = (f"{half * r.n * groups} + " if half else "") + f"{rn} * {groups} + kc // {quant.group}"
    mask = f"{mask_n} & (kc < {r.k})"

    def per_group(param: str) -> str:
        return f"tl.load({param} + {index}, mask={mask}, other=0.0).to(tl.float32)"

    zero += [per_group("zero_ptr")] if quant.zero == "point" else []
    if zero:  # sum(x (q - z)) = sum(x q) - z sum(x)
        lines.append(f"p -= ({' + '.join(zero)}) * xs")
    lines.append(into(f"p * {per_group('scale_ptr')}"))
    if quant.zero == "offset":
        lines.append(into(f"{per_group('zero_ptr')} * xs"))
    return lines


def _row_chunk(r: Recipe, t: Tiles) -> int | None:
    """The chunk of a GEMV taking its rows one at a time (``ROWS``), or None: a k step of at least
    a chunk a thread. Scaled per output channel, a row's products are summed per chunk (as per
    group: the carrier, not a subtraction a weight) and scaled after the loop."""
    if not ROWS or t.block_m != 1:
        return None
    threads = 32 * t.num_warps
    chunk = chunk_bytes(r, t, threads)
    return chunk if chunk and t.block_k * r.quant.bits // 8 // chunk >= threads else None


def row_tiles(r: Recipe, t: Tiles) -> Tiles:
    """The tiles of a GEMV taking its rows one at a time, where it can (``_row_chunk``):
    ``ROW_TILE`` rows (``WIDE``'s for an LM head, H200, 2026-12-03, quant_gemv_bench.py, rows of 8 / 4
    warps -> 16 / 4 -> 16 / 2: int4 51.3 -> 47.7 -> 42.5 us, int8 16 / 4 64.7, 16 / 2 68.3; the
    others as fast or slower with 16 rows or 2 warps, in the step too), a k step of a chunk a
    thread (16 bytes, or 8 where a k step would hold too few), all of k where that fits; else ``t``."""
    wide = r.n >= WIDE[0]
    warps = WIDE[2] if wide and r.quant.bits == 4 else t.num_warps
    step = min(1 << (r.k - 1).bit_length(), 32 * warps * CHUNK * 8 // r.quant.bits)  # a power of two
    rows = dataclasses.replace(t, block_n=WIDE[1] if wide else min(ROW_TILE, t.block_n * 4),
                               block_k=max(step, t.block_k), num_warps=warps)
    return rows if _row_chunk(r, rows) else t


def loop(r: Recipe, specs: dict, t: Tiles, products: list[str]) -> dict:
    """The template's ``qgemv`` context: the chunk's size and count, the accumulators' width
    and the loop's lines (``rows``: x's lines, then ``row_lines`` for each of the tile's rows)."""
    chunk = _row_chunk(r, t)
    rows = chunk is not None
    chunk = chunk or chunk_bytes(r, t)
    if t.block_m != 1 or chunk is None:
        raise ValueError(f"no quantized GEMV of {r.quant.describe(r.k)} in tiles of {t.block_m} rows")
    per_byte = 8 // r.quant.bits
    chunks = t.block_k // per_byte // chunk
    per_channel = r.quant.per_channel(r.k)
    per_chunk = rows or not per_channel
    late = rstd_after(r)
    lines = _x_lines(r, specs, per_chunk, late) + ([] if per_channel else [f"kc = k0 + rc * {chunk * per_byte}"])
    row_lines: list[str] = []
    split: set = set()
    for half, product in enumerate(products):
        (row_lines if rows else lines).extend(_product_lines(r, specs["w"], half, product, chunk, split, rows))

    def tiled(lines: list[str]) -> list[str]:
        return [line.replace("CHUNKS", str(chunks)).replace("TILE", "1" if rows else "BLOCK_N") for line in lines]

    return {"chunk": chunk, "chunks": chunks, "per_byte": per_byte, "k_bytes": r.k // per_byte,
            "width": 1 if per_chunk else chunk, "rows": rows, "lines": tiled(lines),
            "row_lines": tiled(row_lines), "rstd_after": late}
