#!/usr/bin/env python3
"""The masked prefill attention's variants compiled here by the build's Triton, run as cubins on the GPU.

Packages ship cubins from the build machine's Triton (3.8 with torch 2.14); the GPU machine's JIT is older
(3.6), so a probe that compiles there times other code than a package runs. This one compiles each variant
here (no GPU, ``--compile DIR``: a cubin and its launch facts a variant), then loads the cubins on the GPU
through the package runtime's own driver calls (``aotcombo.runtime.cuda``) and times them (``--run DIR``).

The kernel is ``templates/prefill_attention.py.j2`` as a dynamic BERT-base renders it (a bool key mask, sizes
at run time, q/k/v views of the fused QKV linear's output, a first pass finding each batch's visible keys).
Variants: ``BLOCK_M`` query rows, ``GROUP`` such blocks a program (one pass over the mask for all of them);
``PIPELINE`` issues the next key block's q.k product before this block's softmax (Triton still waits for it
within the step: ptxas only interleaves its issue with the exponentials); ``SCAN`` keys a step of the first
pass; keys a step, warps, stages, a cap on registers. ``RUN`` (the name's ``_run<N>``) for a mask whose visible
keys are one run (a padding mask's): 1 masks every block by the keys' indices, not by loading the mask; 2 as
well, but blocks inside the run take the softmax with no mask at all (what the template does now); 3 as 2,
and a row's maximum may lag its scores by up to 8 (log2) so that a block skips the rescale.

    python3 benchmarks/attention_cubin_probe.py --compile DIR          # here: cubins, SASS counts
    python3 benchmarks/attention_cubin_probe.py --run DIR [--out F]    # on a machine with a GPU

Run: BERT-base's shapes with batches after the first padded to random lengths (``axes_bench.py``'s draw);
each variant checked against SDPA in float32 (max abs error <= 4e-3), then timed as a CUDA graph of 12 calls
(a forward's layers) over 4 input sets, medians of 100 replays, two rounds.

H100, torch 2.11, 2026-12-06, four machines, us, the kernel as it was (``RUN`` 0):
128 / 64 rows at 32 x 512 69.2-72.2 / 70.8-72.1, 16 x 256 17.2-18.1 / 16.4-17.3, 8 x 383 20.8-21.5 /
17.3-18.4, 8 x 128 6.2-6.5 / 5.3-5.6, 4 x 129 7.0-7.1 / 5.6-5.7, 2 x 77 5.3-5.4 / 4.2, 1 x 128 5.9-6.1 /
4.4-4.5. Slower at 32 x 512 (the last run): ``PIPELINE`` 80.7-81.8 (207 registers: 2 programs an SM),
first passes of 128 keys 82.6, 8 warps 81.2-81.6, 64 keys a step 89.5-89.7 (64 rows) and 133 (128 rows,
8 warps), registers capped at 128 73.1 (spills), 16-key steps 84, 2 / 4 stages at 64 rows 81.3 / 74,
2 or 4 blocks of 64 rows a program 76.3 / 87. The mask's run (two more runs, 64 rows / 128): ``RUN`` 1
77.8 / 81 (174 registers at 128 rows: 2 programs an SM), 2 67.4-67.9 / 68.5 (16 x 256 16.4-16.5, 8 x 383
16.7-16.8 at 64 rows), 3 94.2 / 106 (the lag's test is a block-wide reduction and a branch around the product).
Nsight Compute at 32 x 512 (128 rows, base clocks): 28.8 M warp instructions, issue slots 44 % busy, 2.8
warps a scheduler (3 programs an SM, held by 168 registers), the tensor pipe 23 % busy; the loop spends
about 13 instructions a score (433 a warp for a 128 x 32 block).
H100, 2026-12-06 (one run, two rounds), 64 rows and the mask's run (``RUN`` 2) with 64 keys a step (127
registers, 4 programs an SM) against 32: 32 x 512 77.5-78.1 / 67.1-67.2, 8 x 383 18.4 / 16.7-16.8, 1 x 128
4.2-4.3 / 4.2; with 2 stages 84.1-84.2 at 32 x 512. Its SASS (32 keys) holds about 230 instructions a thread
a step for 16 scores: 16 exponentials, 16 FMAs, 14 maxima, 18 adds, 32 multiplies of the accumulator.
``_tma`` (K and V through tensor descriptors made in the kernel, rows past the batch's last visible key read
as zeros; 82 registers, the loop no shorter, 4 barriers a step): 64 rows 73.6-73.8 at 32 x 512 against 66.5-67.0,
1 x 128 6.0 against 4.2-4.3; 128 rows, 8 warps 86-87. ``tl.range(..., warp_specialize=True)`` does not apply on
sm_90 with this Triton (3.8): 4 warps fail in its NVGPUWarpSpecialization pass, 8 compile to the same PTX.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
import triton.language as tl

HEADS, HEAD_DIM, QKV_ROW, OUT_ROW = 12, 64, 2304, 768
# the same, for the kernel (BERT-base's 12 heads of 64; q, k, v rows 2304 apart, the output's 768)
H, D, ROW, OUT = tl.constexpr(HEADS), tl.constexpr(HEAD_DIM), tl.constexpr(QKV_ROW), tl.constexpr(OUT_ROW)
SCALE_LOG2 = tl.constexpr(0.125 * 1.4426950408889634)
LAZY = tl.constexpr(8.0)  # RUN 3: a row's maximum may lag its scores by this much (log2): p <= 256
SHAPES = ((32, 512), (16, 256), (8, 383), (8, 128), (4, 129), (2, 77), (1, 128))
# name: (BLOCK_M, GROUP, BLOCK_N, SCAN, PIPELINE, warps, stages, registers a thread at most or 0)
VARIANTS = {
    "m128": (128, 1, 32, 32, False, 4, 3, 0),
    "m64": (64, 1, 32, 32, False, 4, 3, 0),
    "m128_pipeline": (128, 1, 32, 32, True, 4, 3, 0),
    "m128_scan128": (128, 1, 32, 128, False, 4, 3, 0),
    "m128_w8": (128, 1, 32, 32, False, 8, 3, 0),
    "m128_n64_w8": (128, 1, 64, 64, False, 8, 3, 0),
    "m128_r128": (128, 1, 32, 32, False, 4, 3, 128),
    "m64_n64": (64, 1, 64, 64, False, 4, 3, 0),
    "m64_n16": (64, 1, 16, 32, False, 4, 3, 0),
    "m64_s2": (64, 1, 32, 32, False, 4, 2, 0),
    "m64_s4": (64, 1, 32, 32, False, 4, 4, 0),
    "m64x2": (64, 2, 32, 32, False, 4, 3, 0),
    "m64x4": (64, 4, 32, 32, False, 4, 3, 0),
    "m128_run1": (128, 1, 32, 32, False, 4, 3, 0),
    "m128_run2": (128, 1, 32, 32, False, 4, 3, 0),
    "m64_run1": (64, 1, 32, 32, False, 4, 3, 0),
    "m64_run2": (64, 1, 32, 32, False, 4, 3, 0),
    "m64_run3": (64, 1, 32, 32, False, 4, 3, 0),
    "m128_run3": (128, 1, 32, 32, False, 4, 3, 0),
    "m64_n64_run2": (64, 1, 64, 64, False, 4, 3, 0),  # 127 registers, 4 programs an SM
    "m64_n64_s2_run2": (64, 1, 64, 64, False, 4, 2, 0),
    "m64_run2_tma": (64, 1, 32, 32, False, 4, 3, 0),
    "m128_w8_run2_tma": (128, 1, 32, 32, False, 8, 3, 0),
    "m64_n64_run2_tma": (64, 1, 64, 64, False, 4, 3, 0),
}


@triton.jit
def _softmax_step(qk, allowed, m_i, l_i, acc, v):
    p, alpha, m_new = _masked_scores(qk, allowed, m_i)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return m_new, l_i, acc


@triton.jit
def _masked_scores(qk, allowed, m_i):
    scores = qk * SCALE_LOG2 + tl.where(allowed, 0.0, float("-inf"))[None, :]
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key visible yet: p = 0, not NaN
    return tl.math.exp2(scores - m_safe[:, None]), tl.math.exp2(m_i - m_safe), m_new


@triton.jit
def _scores(qk, m_i):
    """``_masked_scores`` of a block every key of which is visible."""
    m_new = tl.maximum(m_i, tl.max(qk, 1) * SCALE_LOG2)
    return tl.math.exp2(qk * SCALE_LOG2 - m_new[:, None]), tl.math.exp2(m_i - m_new), m_new


@triton.jit
def _rows(q_ptr, k_base, v_base, mask_row, out_ptr, b, h, first_row, rows, first, hi, run, q_stride0, out_stride0,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PIPELINE: tl.constexpr, RUN: tl.constexpr,
          TMA: tl.constexpr):
    """BLOCK_M query rows from ``first_row`` against the keys lo..hi."""
    rm = first_row + tl.arange(0, BLOCK_M)
    rn0 = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, D)
    rows_ok = rm < rows
    q = tl.load(q_ptr + b * q_stride0 + h * D + rm[:, None] * ROW + rd[None, :], mask=rows_ok[:, None],
                other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    lo = first // BLOCK_N * BLOCK_N
    if PIPELINE:
        rn = lo + rn0
        k = tl.load(k_base + rn[:, None] * ROW + rd[None, :], mask=(rn < hi)[:, None], other=0.0)
        qk = tl.dot(q, tl.trans(k))
        for start in range(lo, hi, BLOCK_N):
            rn = start + rn0
            keys_ok = rn < hi
            rn_next = rn + BLOCK_N
            k_next = tl.load(k_base + rn_next[:, None] * ROW + rd[None, :], mask=(rn_next < hi)[:, None],
                             other=0.0)
            qk_next = tl.dot(q, tl.trans(k_next))
            v = tl.load(v_base + rn[:, None] * ROW + rd[None, :], mask=keys_ok[:, None], other=0.0)
            allowed = tl.load(mask_row + rn, mask=keys_ok, other=0) != 0
            m_i, l_i, acc = _softmax_step(qk, allowed, m_i, l_i, acc, v)
            qk = qk_next
    else:
        if TMA:  # K and V through tensor descriptors of the batch's hi keys: rows past hi read as zeros
            k_desc = tl.make_tensor_descriptor(k_base, shape=[hi, D], strides=[ROW, 1], block_shape=[BLOCK_N, D])
            v_desc = tl.make_tensor_descriptor(v_base, shape=[hi, D], strides=[ROW, 1], block_shape=[BLOCK_N, D])
        for start in range(lo, hi, BLOCK_N):
            rn = start + rn0
            keys_ok = rn < hi
            if TMA:
                k = k_desc.load([start, 0])
                v = v_desc.load([start, 0])
            else:
                k = tl.load(k_base + rn[:, None] * ROW + rd[None, :], mask=keys_ok[:, None], other=0.0)
                v = tl.load(v_base + rn[:, None] * ROW + rd[None, :], mask=keys_ok[:, None], other=0.0)
            qk = tl.dot(q, tl.trans(k))
            if RUN == 0:
                allowed = tl.load(mask_row + rn, mask=keys_ok, other=0) != 0
                m_i, l_i, acc = _softmax_step(qk, allowed, m_i, l_i, acc, v)
            else:  # the mask read only where the visible keys are not one run first..hi-1
                interior = run and start >= first and start + BLOCK_N <= hi
                if RUN == 3 and interior and tl.max(tl.max(qk, 1) * SCALE_LOG2 - m_i, 0) <= LAZY:
                    # no row's maximum grew by more than LAZY: the old one stays, p <= 2^LAZY, no rescale
                    p = tl.math.exp2(qk * SCALE_LOG2 - m_i[:, None])
                    l_i += tl.sum(p, 1)
                    acc = tl.dot(p.to(v.dtype), v, acc)
                else:
                    if RUN >= 2 and interior:
                        p, alpha, m_new = _scores(qk, m_i)
                    else:
                        allowed = tl.load(mask_row + rn, mask=keys_ok & (run == 0), other=1) != 0
                        p, alpha, m_new = _masked_scores(qk, allowed & keys_ok & (rn >= first), m_i)
                    l_i = l_i * alpha + tl.sum(p, 1)
                    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
                    m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # a row no key may be seen by: zeros
    tl.store(out_ptr + b * out_stride0 + h * D + rm[:, None] * OUT + rd[None, :], out.to(tl.float16),
             mask=rows_ok[:, None])


@triton.jit
def attention(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr, rows, keys, q_stride0, mask_stride0, out_stride0,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCAN: tl.constexpr, PIPELINE: tl.constexpr,
              GROUP: tl.constexpr, RUN: tl.constexpr, TMA: tl.constexpr):
    """A program: GROUP blocks of BLOCK_M query rows of one (batch, head), one after the other, after one
    first pass over the batch's mask."""
    pid = tl.program_id(0)
    row_groups = (rows + BLOCK_M * GROUP - 1) // (BLOCK_M * GROUP)
    bh = pid // row_groups
    b = (bh // H).to(tl.int64)
    h = bh % H
    mask_row = mask_ptr + b * mask_stride0
    first, last, count = keys, -1, 0
    for start in range(0, keys, SCAN):
        rs = start + tl.arange(0, SCAN)
        seen = tl.load(mask_row + rs, mask=rs < keys, other=0) != 0
        first = tl.minimum(first, tl.min(tl.where(seen, rs, keys), 0))
        last = tl.maximum(last, tl.max(tl.where(seen, rs, -1), 0))
        if RUN:
            count += tl.sum(seen.to(tl.int32), 0)
    hi = last + 1  # none visible: no block, and zeros out
    run = count == hi - first  # the visible keys are one run
    k_base = k_ptr + b * q_stride0 + h * D
    v_base = v_ptr + b * q_stride0 + h * D
    for g in tl.static_range(GROUP):
        first_row = (pid % row_groups * GROUP + g) * BLOCK_M
        if first_row < rows:
            _rows(q_ptr, k_base, v_base, mask_row, out_ptr, b, h, first_row, rows, first, hi, run, q_stride0,
                  out_stride0, BLOCK_M, BLOCK_N, PIPELINE, RUN, TMA)


SIGNATURE = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "mask_ptr": "*i1", "out_ptr": "*fp16",
             "rows": "i32", "keys": "i32", "q_stride0": "i32", "mask_stride0": "i32", "out_stride0": "i32",
             "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "SCAN": "constexpr", "PIPELINE": "constexpr",
             "GROUP": "constexpr", "RUN": "constexpr", "TMA": "constexpr"}
ALIGNED = ("q_ptr", "k_ptr", "v_ptr", "mask_ptr", "out_ptr", "q_stride0", "out_stride0")


def sass_counts(cubin: bytes) -> dict:
    """Registers and the main loop's SASS: its instructions, tensor-core ops and waits."""
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tools / "cuobjdump"), "--dump-resource-usage", f.name], capture_output=True,
                               text=True).stdout
        sass = subprocess.run([str(tools / "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    ops = [line.split("*/")[1].strip() for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    names = [op.split()[0] if not op.startswith("@") else op.split()[1] for op in ops if op]
    return {"registers": int(regs[1]), "stack": int(regs[2]), "instructions": len(names),
            "hgmma": sum(n.startswith("HGMMA") for n in names), "mufu_ex2": names.count("MUFU.EX2"),
            "waits": len([op for op in ops if op.startswith("WARPGROUP.DEPBAR")])}


def compile_all(out: Path) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out.mkdir(parents=True, exist_ok=True)
    params = [p for p, kind in SIGNATURE.items() if kind != "constexpr"]
    for name, (block_m, group, block_n, scan, pipeline, warps, stages, maxnreg) in VARIANTS.items():
        run = int(name.split("_run", 1)[1][0]) if "_run" in name else 0
        consts = {"BLOCK_M": block_m, "BLOCK_N": block_n, "SCAN": scan, "PIPELINE": pipeline, "GROUP": group,
                  "RUN": run, "TMA": name.endswith("_tma")}
        src = ASTSource(fn=attention, signature=SIGNATURE, constexprs=consts,
                        attrs={(params.index(p),): [["tt.divisibility", 16]] for p in ALIGNED})
        try:
            options = {"num_warps": warps, "num_stages": stages, **({"maxnreg": maxnreg} if maxnreg else {})}
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"{name:14} {type(exc).__name__}: {str(exc)[:300]}")
            continue
        (out / f"{name}.cubin").write_bytes(k.asm["cubin"])
        facts = {"function": k.metadata.name, "warps": warps, "shared": k.metadata.shared, "rows": block_m * group,
                 "global_scratch": [k.metadata.global_scratch_size, k.metadata.global_scratch_align],
                 "profile_scratch": [getattr(k.metadata, "profile_scratch_size", 0),
                                     getattr(k.metadata, "profile_scratch_align", 1)]}
        (out / f"{name}.json").write_text(json.dumps(facts))
        counts = sass_counts(k.asm["cubin"])
        print(f"{name:14} shared {k.metadata.shared:6}  " + "  ".join(f"{key} {v}" for key, v in counts.items()))


def run_all(folder: Path, out: Path | None) -> None:
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]
    import torch

    from aotcombo.runtime import cuda
    from axes_bench import input_sets
    from fused_linear_bench import time_graph

    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    torch.empty(1, device="cuda")  # torch's context, made current
    cuda.set_current_context(cuda.primary_context(torch.cuda.current_device()))
    kernels = {}
    for facts_file in sorted(folder.glob("*.json")):
        facts = json.loads(facts_file.read_text())
        function = cuda.get_function(cuda.load_module(facts_file.with_suffix(".cubin").read_bytes()), facts["function"])
        kernels[facts_file.stem] = (function, facts)
    rows = []
    for batch, seq in SHAPES:
        sets = []
        for ids, mask in input_sets(batch, seq):
            g = torch.Generator(device="cuda").manual_seed(int(ids.sum()))
            qkv = torch.randn(batch, seq, 3 * OUT_ROW, device="cuda", generator=g).half()
            sets.append({"qkv": qkv, "mask": mask.bool(), "out": torch.empty(batch, seq, OUT_ROW, device="cuda",
                                                                               dtype=torch.half)})
        row = {"batch": batch, "seq": seq, "device": torch.cuda.get_device_name()}
        for name, (function, facts) in kernels.items():
            programs = batch * HEADS * triton.cdiv(seq, facts["rows"])
            kernel = cuda.LoadedKernel(function, (programs, 1, 1), facts["warps"], facts["shared"], ["ptr"] * 5 +
                                       ["i32"] * 5, tuple(facts["global_scratch"]), tuple(facts["profile_scratch"]))
            launchers = {}  # by stream: the graph's capture runs on a stream of its own

            def step(t, kernel=kernel, launchers=launchers):
                stream = torch.cuda.current_stream().cuda_stream
                launch = launchers.get(stream) or launchers.setdefault(stream, kernel.bind(stream))
                qkv = t["qkv"]
                launch(qkv, qkv[..., OUT_ROW:], qkv[..., 2 * OUT_ROW:], t["mask"], t["out"], seq, seq, seq * QKV_ROW,
                       seq, seq * OUT_ROW)

            error = 0.0
            for t in sets:
                t["out"].fill_(float("nan"))
                step(t)
                q, k, v = (x.view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2).float()
                           for x in t["qkv"].split(OUT_ROW, -1))
                ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=t["mask"][:, None, None, :])
                got = t["out"].float().view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
                error = max(error, (got - ref).abs().max().item())
            if not error <= 4e-3:
                row[name] = f"WRONG {error:.1e}"
                continue
            row[name] = [round(time_graph(step, sets, 12, 100), 2) for _ in range(2)]
            row[name + "_error"] = error
        rows.append(row)
        print(json.dumps(row), flush=True)
    if out:
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = list(kernels)
    print(f"\n{'us, round 1 / 2':>16}  " + "  ".join(f"{n:>14}" for n in names))
    for row in rows:
        cells = [row[n] if isinstance(row[n], str) else f"{row[n][0]:.1f} / {row[n][1]:.1f}" for n in names]
        print(f"{row['batch']:>6} x {row['seq']:<6}  " + "  ".join(f"{c:>14}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--compile", type=Path, metavar="DIR", help="compile every variant for sm_90 into DIR (no GPU)")
    mode.add_argument("--run", type=Path, metavar="DIR", help="load DIR's cubins on the GPU, check and time them")
    parser.add_argument("--out", type=Path, help="with --run: write the rows as JSON lines here")
    args = parser.parse_args()
    if args.compile:
        compile_all(args.compile)
    else:
        run_all(args.run, args.out)


if __name__ == "__main__":
    main()
