"""GELU in 16 bits for Inductor: its transcendental through one ``exp2``.

Inductor writes GELU (``aten.gelu``) as ``0.5 x (1 + erf(x / sqrt 2))`` with libdevice's ``erf``:
some thirty instructions an element, so that an FFN's GELU kernel is bound by them, not by its
bytes. H200, fp16 and bf16, one kernel reading and writing 16384 x 3072 elements (BERT-base's FFN
at 32 x 512): a copy 48.8 us, libdevice's erf 71.9, the form below 56.8 (4096 rows: 12.6, 19.5,
15.4). Whole models, H200, packages before and after called in turn, medians of 300
(``benchmarks/zoo_bench.py``'s models): BERT-base 32 x 512 7.18 -> 6.94 ms (0.966x; dynamic or
exact), 16 x 256 0.984x, 8 x 128 0.982x, ViT-B/16 at batch 8 0.988x; the same errors against eager
(1.76e-3 relative).

``erfc`` by Abramowitz and Stegun's 7.1.26 (``t = 1 / (1 + p z)``, a fifth-degree polynomial in
``t`` times ``exp(-z^2)``; its error under 1.5e-7), and ``gelu(x) = x (1 - erfc(z) / 2)`` for
``x >= 0``, ``x erfc(z) / 2`` below, ``z = |x| / sqrt 2``. Below zero this never forms ``1 +
erf``, whose float32 cancellation is eager's largest error there: against GELU in float64, on
10^6 normal inputs (times 2) ours and eager's float32 results rounded to fp16 differ in 3.6 % of
elements, one unit in the last place, and in 77 % of those ours is the nearer (bf16: 1.9 %, 97 %).

The tanh form (``approximate="tanh"``) stays Inductor's: written ``x sigmoid(2 u)`` (exact
algebra), with GPT-2 small's GELU (transformers' ``gelu_new``, its ops) recognised as that op,
GPT-2 at 4 x 256 measured the same (H200, 2026-12-02, in turn, 3 runs: 0.837 / 0.845 / 0.841
against 0.836 / 0.844 / 0.841 ms).

Only where x is fp16 or bf16 (the result is rounded to 8 or 11 bits of mantissa); float32 keeps
Inductor's libdevice calls, within an ulp of eager's.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten
SQRT1_2, LOG2E = 0.7071067811865476, 1.4426950408889634
ERFC_P, ERFC_A = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def gelu(x, approximate: str = "none"):
    """``aten.gelu`` of a 16-bit tensor, computed in float32 as above (else ``NotImplemented``:
    Inductor's)."""
    if x.dtype not in (torch.float16, torch.bfloat16) or approximate != "none":
        return NotImplemented
    xf = x.float()
    z = xf.abs() * SQRT1_2
    t = torch.reciprocal(1.0 + ERFC_P * z)
    poly = ERFC_A[-1]
    for a in reversed(ERFC_A[:-1]):
        poly = a + t * poly
    half_erfc = 0.5 * t * poly * torch.exp2(z * z * -LOG2E)  # erfc(z) / 2: 0, not NaN, at |x| = inf
    return (xf * torch.where(xf >= 0, 1.0 - half_erfc, half_erfc)).to(x.dtype)


TABLE = {aten.gelu.default: gelu}
