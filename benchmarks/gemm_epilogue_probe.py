"""Does a GELU belong in the epilogue of a full-size linear? A Hopper matmul of ours (TMA
descriptors, programs taking tiles in turn, Triton's tutorial-09 shape) with bias, or bias + GELU
fused, against cuBLAS and cuBLAS + torch's GELU kernel, on the GPU.

    python3 benchmarks/gemm_epilogue_probe.py [--out rows.jsonl] [--shapes bert_16384 ...]
    python3 benchmarks/gemm_epilogue_probe.py --resources   # no GPU: registers, stack, shared memory (sm_90)

The question (issue 26's last 3 %, issue 30's launches a layer): BERT-base at 32 x 512 spends
14 % of its time in the erf-GELU pass after FFN-up (a memory-bound read and write of 16384 x
3072). Variants: the tile rule (``CONFIGS``); one program an SM, two (one's epilogue can run while
the other's products do), or one a tile; a warp-specialized tile loop; the GELU from libdevice's
``erf`` or from a polynomial erfc (Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7, three orders
under a float16 rounding); the accumulator stored in 2 or 4 column slices (a whole tile's GELU
spills). Each variant is checked against float64 on fresh random inputs (relative L2 <= 1e-2, the
output poisoned with NaN first) and timed as CUDA graphs of 10 calls over 4 input sets, medians of
50 replays (``fused_linear_bench.time_graph``). What it found is in ``kernels/linear/recipe.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.language.extra import libdevice

SHAPES = {  # name: (M, K, N): FFN-up of BERT-base at 32 x 512 and 8 x 512 tokens, ViT-B/16 at batch 8
    "bert_16384": (16384, 768, 3072), "bert_4096": (4096, 768, 3072), "vit_1576": (1576, 768, 3072),
}
# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the first with one program an SM, the rest small
# enough for two (shared memory): one's epilogue runs while the other's matrix products do
CONFIGS = [(128, 256, 64, 8, 3), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 128, 64, 4, 2),
           (128, 256, 64, 8, 2)]
# grid: "sm" one program an SM, "sm2" two, "tile" one a tile; warp-specialized loop; epilogue; slices
VARIANTS = [(c, grid, ws, epi, slices) for c in CONFIGS for grid, ws in (("sm", False), ("sm2", False),
                                                                        ("tile", False), ("sm", True))
            for epi, slices in (("bias", 2), ("gelu_libdevice", 2), ("gelu_libdevice", 4), ("gelu_poly", 4))]
EPILOGUES = ("bias", "gelu_libdevice", "gelu_poly")


def label(variant) -> str:
    (bm, bn, bk, warps, stages), grid, ws, epi, slices = variant
    return f"{epi}/{bm}x{bn}x{bk}/{warps}w{stages}s/{grid}{'/ws' if ws else ''}/{slices}"


@triton.jit
def gelu_poly(x):
    # x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); 1 + erf(-z) = erfc(z) from A&S 7.1.26 (no cancellation)
    z = tl.abs(x) * 0.7071067811865476
    t = tl.fdiv(1.0, 1.0 + 0.3275911 * z, ieee_rounding=False)
    p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erfc = p * tl.exp(-z * z)
    return 0.5 * x * tl.where(x >= 0, 2.0 - erfc, erfc)


@triton.jit
def epilogue(acc, bias_ptr, cols, EPILOGUE: tl.constexpr):
    acc = acc + tl.load(bias_ptr + cols).to(tl.float32)[None, :]
    if EPILOGUE == "gelu_libdevice":
        acc = 0.5 * acc * (1.0 + libdevice.erf(acc * 0.7071067811865476))
    elif EPILOGUE == "gelu_poly":
        acc = gelu_poly(acc)
    return acc


@triton.jit
def store_slices(acc, bias_ptr, out_desc, row0, col0, BLOCK_N: tl.constexpr, SLICES: tl.constexpr,
                 EPILOGUE: tl.constexpr):
    """The tile's epilogue and store, in SLICES column slices (fewer registers live at once)."""
    if SLICES == 1:
        acc = epilogue(acc, bias_ptr, col0 + tl.arange(0, BLOCK_N), EPILOGUE)
        out_desc.store([row0, col0], acc.to(out_desc.dtype))
    else:
        a0, a1 = tl.split(tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1)))
        store_slices(a0, bias_ptr, out_desc, row0, col0, BLOCK_N // 2, SLICES // 2, EPILOGUE)
        store_slices(a1, bias_ptr, out_desc, row0, col0 + BLOCK_N // 2, BLOCK_N // 2, SLICES // 2, EPILOGUE)


@triton.jit
def linear_persistent(x_ptr, w_ptr, bias_ptr, out_ptr, M, N: tl.constexpr, K: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      SLICES: tl.constexpr, EPILOGUE: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """out[M, N] = epilogue(x[M, K] @ w[N, K].T + bias): the programs of the grid take the tiles in
    turn (one each where the grid has a program a tile), in groups of 8 row tiles (W's columns
    stay in L2), the epilogue's store in SLICES column slices."""
    GROUP_M: tl.constexpr = 8
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n: tl.constexpr = N // BLOCK_N
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N // SLICES])
    per_group = GROUP_M * tiles_n
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), warp_specialize=WARP_SPECIALIZE):
        group = tile // per_group
        first_m = group * GROUP_M
        group_m = min(tiles_m - first_m, GROUP_M)
        row0 = (first_m + tile % group_m) * BLOCK_M
        col0 = (tile % per_group) // group_m * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc = tl.dot(x_desc.load([row0, k0]), w_desc.load([col0, k0]).T, acc)
        store_slices(acc, bias_ptr, out_desc, row0, col0, BLOCK_N, SLICES, EPILOGUE)


def launch(x, w, bias, out, variant):
    (block_m, block_n, block_k, warps, stages), grid, ws, epi, slices = variant
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    m, (n, k) = x.shape[0], w.shape
    tiles = triton.cdiv(m, block_m) * (n // block_n)
    programs = {"sm": min(sms, tiles), "sm2": min(2 * sms, tiles), "tile": tiles}[grid]
    linear_persistent[(programs,)](x, w, bias, out, m, n, k, block_m, block_n, block_k, slices, epi, ws,
                                   num_warps=warps, num_stages=stages)


def usage(cubin: bytes) -> str:
    """Registers and stack (spills) from Triton's own cuobjdump."""
    import re
    import subprocess
    import tempfile

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", text)
    return f"regs {found[1]} stack {found[2]}" if found else text.strip()[-120:]


def resources() -> None:
    """Registers, spills and shared memory of each variant for sm_90, compiled here (no GPU)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {"x_ptr": "*fp16", "w_ptr": "*fp16", "bias_ptr": "*fp16", "out_ptr": "*fp16", "M": "i32",
           "N": "constexpr", "K": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
           "BLOCK_K": "constexpr", "SLICES": "constexpr", "EPILOGUE": "constexpr", "WARP_SPECIALIZE": "constexpr"}
    for variant in VARIANTS:
        (bm, bn, bk, warps, stages), grid, ws, epi, slices = variant
        if grid != "sm":
            continue
        consts = {"N": 3072, "K": 768, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SLICES": slices,
                  "EPILOGUE": epi, "WARP_SPECIALIZE": ws}
        src = ASTSource(fn=linear_persistent, signature=sig, constexprs=consts,
                        attrs={(i,): [["tt.divisibility", 16]] for i in range(4)})
        try:
            options = {"num_warps": warps, "num_stages": stages}
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
            print(f"{label(variant):44} {usage(k.asm['cubin'])} shared {k.metadata.shared}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{label(variant):44} {type(exc).__name__}: {str(exc)[:300]}")


def run(names: list[str], out: Path | None) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fused_linear_bench import time_graph

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    rows = []
    for name in names:
        m, k, n = SHAPES[name]
        gen = torch.Generator(device="cuda")

        def operands(seed):
            gen.manual_seed(seed)
            return {"x": torch.randn(m, k, device="cuda", generator=gen).half(),
                    "w": (torch.randn(n, k, device="cuda", generator=gen) / k ** 0.5).half(),
                    "bias": torch.randn(n, device="cuda", generator=gen).half(),
                    "out": torch.empty(m, n, device="cuda", dtype=torch.half)}
        sets = [operands(s) for s in range(4)]
        check = operands(100)
        pre = check["x"].double() @ check["w"].double().T + check["bias"].double()
        refs = {"bias": pre, "gelu": F.gelu(pre)}
        row = {"name": name, "m": m, "k": k, "n": n, "device": torch.cuda.get_device_name()}
        row["cublas_bias_us"] = time_graph(lambda t: F.linear(t["x"], t["w"], t["bias"]), sets)
        row["cublas_gelu_us"] = time_graph(lambda t: F.gelu(F.linear(t["x"], t["w"], t["bias"])), sets)
        row["gelu_pass_us"] = time_graph(lambda t: F.gelu(t["out"]), sets)
        # cuBLASLt's own GELU epilogue (the tanh approximation: not the model's erf GELU; a ceiling)
        row["cublaslt_gelu_tanh_us"] = time_graph(
            lambda t: torch._addmm_activation(t["bias"], t["x"], t["w"].T, use_gelu=True), sets)
        for variant in VARIANTS:
            name_ = label(variant)
            try:
                check["out"].fill_(float("nan"))
                launch(check["x"], check["w"], check["bias"], check["out"], variant)
                ref = refs["bias" if variant[3] == "bias" else "gelu"]
                error = ((check["out"].double() - ref).norm() / ref.norm()).item()
                if not error <= 1e-2:
                    row[name_] = f"WRONG {error:.1e}"
                    continue
                row[name_] = time_graph(lambda t, v=variant: launch(t["x"], t["w"], t["bias"], t["out"], v), sets)
            except Exception as exc:  # noqa: BLE001 - a variant that does not compile or fit
                row[name_] = f"{type(exc).__name__}: {str(exc)[:120]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for row in rows:
        print(f"\n{row['name']} ({row['m']} x {row['k']} -> {row['n']}, {row['device']}), us:")
        print(f"  cuBLAS bias {row['cublas_bias_us']:.1f}  cuBLAS + GELU {row['cublas_gelu_us']:.1f}"
              f"  GELU pass {row['gelu_pass_us']:.1f}  cuBLASLt tanh-GELU epilogue {row['cublaslt_gelu_tanh_us']:.1f}")
        for epi in EPILOGUES:
            timed = {k: v for k, v in row.items() if k.startswith(epi + "/") and isinstance(v, float)}
            for k_, v in sorted(timed.items(), key=lambda kv: kv[1])[:6]:
                print(f"  {k_:44} {v:8.1f}")
            bad = [f"{k_}: {v}" for k_, v in row.items() if k_.startswith(epi + "/") and isinstance(v, str)]
            for b in bad[:3]:
                print(f"  {b}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the rows as JSON lines here")
    parser.add_argument("--shapes", nargs="*", choices=sorted(SHAPES), help="these shapes only (default: all)")
    parser.add_argument("--resources", action="store_true", help="compile for sm_90 here and print registers")
    args = parser.parse_args()
    if args.resources:
        resources()
    else:
        run(args.shapes or list(SHAPES), args.out)


if __name__ == "__main__":
    main()
