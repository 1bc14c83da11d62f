"""The Triton flash-attention forward (non-causal) that prefill_attention_bench.py times against torch's
SDPA backends: the kernel, its tile configs (``CONFIGS``, by head dim) and ``attention``, the host call that
launches it on q, k, v of any strides. Not used by packages.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
MASKED_AT = tl.constexpr(-65504.0)  # additive mask values at or below fp16's finfo.min (-inf aside) mask a key
MASKED_SCORE = tl.constexpr(-1.0e30)  # a masked key's log2 score: swamps q.k, so a row of only those averages them


@triton.jit
def _load_tile(ptrs, rows_ok, cols_ok, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    if CHECK_ROWS and CHECK_COLS:
        tile = tl.load(ptrs, mask=rows_ok[:, None] & cols_ok[None, :], other=0.0)
    elif CHECK_ROWS:
        tile = tl.load(ptrs, mask=rows_ok[:, None], other=0.0)
    elif CHECK_COLS:
        tile = tl.load(ptrs, mask=cols_ok[None, :], other=0.0)
    else:
        tile = tl.load(ptrs)
    return tile


@triton.jit(do_not_specialize=["seq_q", "seq_k"])
def attention_fwd_kernel(Q, K, V, Out, Mask, sm_scale, heads, seq_q, seq_k,
                         stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
                         stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os, stride_od,
                         stride_mb, stride_mk,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         HAS_MASK: tl.constexpr, KEY_TAIL: tl.constexpr, USE_TMA: tl.constexpr,
                         STRIDE_UNIT: tl.constexpr, SKIP_MASKED: tl.constexpr = False, SCAN: tl.constexpr = 0):
    """One program: BLOCK_M queries of one (batch, head) against all its keys, BLOCK_N at a time (online
    softmax in the log2 domain); KEY_TAIL: seq_k is not a multiple of BLOCK_N. The batch, head and seq strides come
    in units of STRIDE_UNIT elements (16 bytes where the host found them all multiples of it): Triton specializes
    strides on divisibility by 16 only, and without the unit a head dim of 40 loads unvectorized, unpipelined."""
    stride_qb, stride_qh, stride_qs = stride_qb * STRIDE_UNIT, stride_qh * STRIDE_UNIT, stride_qs * STRIDE_UNIT
    stride_kb, stride_kh, stride_ks = stride_kb * STRIDE_UNIT, stride_kh * STRIDE_UNIT, stride_ks * STRIDE_UNIT
    stride_vb, stride_vh, stride_vs = stride_vb * STRIDE_UNIT, stride_vh * STRIDE_UNIT, stride_vs * STRIDE_UNIT
    stride_ob, stride_oh, stride_os = stride_ob * STRIDE_UNIT, stride_oh * STRIDE_UNIT, stride_os * STRIDE_UNIT
    start_m = tl.program_id(0) * BLOCK_M
    off_b = (tl.program_id(1) // heads).to(tl.int64)
    off_h = (tl.program_id(1) % heads).to(tl.int64)
    q_base = Q + off_b * stride_qb + off_h * stride_qh
    k_base = K + off_b * stride_kb + off_h * stride_kh
    v_base = V + off_b * stride_vb + off_h * stride_vh
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    rows_ok = rows < seq_q
    dims_ok = dims < HEAD_DIM
    PAD_D: tl.constexpr = HEAD_DIM != BLOCK_D
    if USE_TMA:  # descriptors per (batch, head); TMA fills rows past seq and columns past HEAD_DIM with zeros
        q = tl.make_tensor_descriptor(q_base, shape=[seq_q, HEAD_DIM], strides=[stride_qs, 1],
                                      block_shape=[BLOCK_M, BLOCK_D]).load([start_m, 0])
        k_desc = tl.make_tensor_descriptor(k_base, shape=[seq_k, HEAD_DIM], strides=[stride_ks, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
        v_desc = tl.make_tensor_descriptor(v_base, shape=[seq_k, HEAD_DIM], strides=[stride_vs, 1],
                                           block_shape=[BLOCK_N, BLOCK_D])
    else:
        q = _load_tile(q_base + rows[:, None] * stride_qs + dims[None, :] * stride_qd, rows_ok, dims_ok, True, PAD_D)
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    mask_row = Mask + off_b * stride_mb
    lo, hi = 0, seq_k
    if HAS_MASK and SKIP_MASKED:  # only the blocks from the first to the last key the batch's row may see
        first, last = seq_k, -1
        SCAN_BLOCK: tl.constexpr = SCAN if SCAN else BLOCK_N  # keys a step of this first pass
        for start in range(0, seq_k, SCAN_BLOCK):
            keys = start + tl.arange(0, SCAN_BLOCK)
            raw = tl.load(mask_row + keys * stride_mk, mask=keys < seq_k, other=float("-inf")).to(tl.float32)
            seen = raw > MASKED_AT
            first = tl.minimum(first, tl.min(tl.where(seen, keys, seq_k), 0))
            last = tl.maximum(last, tl.max(tl.where(seen, keys, -1), 0))
        if last >= 0:  # a key seen: those outside add exactly 0 (exp2 of -1e30); none seen: every key counts
            lo, hi = first // BLOCK_N * BLOCK_N, last + 1
    # The key tail is checked in every block: a last block peeled off the loop made ptxas serialize the wgmmas
    # (C7515; triton 3.8, sm_90a).
    for start_n in range(lo, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        keys_ok = keys < seq_k
        if USE_TMA:
            k = k_desc.load([start_n, 0])
            v = v_desc.load([start_n, 0])
        else:
            k = _load_tile(k_base + keys[:, None] * stride_ks + dims[None, :] * stride_kd, keys_ok, dims_ok,
                           KEY_TAIL, PAD_D)
            v = _load_tile(v_base + keys[:, None] * stride_vs + dims[None, :] * stride_vd, keys_ok, dims_ok,
                           KEY_TAIL, PAD_D)
        qk = tl.dot(q, tl.trans(k))
        if HAS_MASK or KEY_TAIL:
            if HAS_MASK:  # keys past seq_k: -inf, left out like torch's -inf
                raw = tl.load(mask_row + keys * stride_mk, mask=keys_ok, other=float("-inf")).to(tl.float32)
                bias = tl.where(raw > MASKED_AT, raw * LOG2E,
                                tl.where(raw == float("-inf"), float("-inf"), MASKED_SCORE))
            else:
                bias = tl.where(keys_ok, 0.0, float("-inf"))
            scores = qk * qk_scale + bias[None, :]
            m_ij = tl.maximum(m_i, tl.max(scores, 1))
            m_shift = tl.where(m_ij == float("-inf"), 0.0, m_ij)  # a row with only -inf keys so far: p = 0, not NaN
            p = tl.math.exp2(scores - m_shift[:, None])
            alpha = tl.math.exp2(m_i - m_shift)
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_ij
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # l = 0: every key -inf, 0 like torch's math backend
    o_ptrs = Out + off_b * stride_ob + off_h * stride_oh + rows[:, None] * stride_os + dims[None, :] * stride_od
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=rows_ok[:, None] & dims_ok[None, :])


class TileConfig(NamedTuple):
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False
    skip: bool = False  # key blocks no row of the batch may see are not read (masked calls only)
    scan: int = 0  # with skip: keys a step of the pass that finds them (0: block_n)

    @property
    def name(self) -> str:
        return (f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}" + ("-tma" if self.tma else "")
                + ("-skip" if self.skip else "") + (f"-scan{self.scan}" if self.scan else ""))


CONFIGS = {  # by the head dim padded to a power of 2 (40 -> 64, 80 -> 128)
    64: (TileConfig(128, 64, 4, 3), TileConfig(128, 128, 8, 3), TileConfig(64, 64, 4, 3),
         TileConfig(128, 64, 4, 3, True), TileConfig(128, 128, 8, 3, True), TileConfig(128, 64, 4, 3, skip=True),
         TileConfig(64, 64, 4, 3, skip=True), TileConfig(128, 64, 4, 3, True, True),
         TileConfig(128, 32, 4, 3, skip=True), TileConfig(128, 32, 4, 3, skip=True, scan=256),
         TileConfig(128, 32, 4, 2, skip=True), TileConfig(128, 32, 4, 4, skip=True),
         TileConfig(128, 32, 8, 3, skip=True), TileConfig(128, 64, 8, 3, skip=True),
         TileConfig(256, 32, 8, 3, skip=True), TileConfig(256, 64, 8, 3, skip=True),
         TileConfig(64, 32, 4, 3, skip=True), TileConfig(128, 16, 4, 3, skip=True)),
    128: (TileConfig(128, 64, 8, 3), TileConfig(128, 128, 8, 2), TileConfig(64, 64, 4, 3),
          TileConfig(128, 64, 8, 3, True), TileConfig(128, 128, 8, 2, True)),
}


def attention(q, k, v, out, config: TileConfig, key_mask=None, sm_scale=None):
    """out = softmax(q @ k^T * sm_scale + key_mask[:, None, None, :]) @ v.

    q, k, v, out: [batch, heads, seq, head_dim] by their strides (out may be a [batch, seq, heads, d]
    tensor's transpose); key_mask: None or an additive float [batch, seq_k] (0, -inf or finfo.min)."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    unit = 16 // q.element_size()  # strides in units of 16 bytes where they all are multiples (see the kernel)
    if not all(t.data_ptr() % 16 == 0 and all(s % unit == 0 for s in t.stride()[:3]) for t in (q, k, v, out)):
        unit = 1
    if config.tma and (unit == 1 or any(t.stride(3) != 1 for t in (q, k, v))):
        raise ValueError("TMA needs the head dim contiguous, the base and other strides multiples of 16 bytes")
    strides = [s for t in (q, k, v, out) for s in (*(s // unit for s in t.stride()[:3]), t.stride(3))]
    mask_strides = (0, 0) if key_mask is None else key_mask.stride()
    attention_fwd_kernel[(triton.cdiv(seq_q, config.block_m), batch * heads)](
        q, k, v, out, q if key_mask is None else key_mask, head_dim ** -0.5 if sm_scale is None else sm_scale,
        heads, seq_q, seq_k, *strides, *mask_strides, HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim),
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, HAS_MASK=key_mask is not None,
        KEY_TAIL=seq_k % config.block_n != 0, USE_TMA=config.tma, STRIDE_UNIT=unit, SKIP_MASKED=config.skip,
        SCAN=config.scan,
        num_warps=config.num_warps, num_stages=config.num_stages)
    return out
