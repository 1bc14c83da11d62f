"""The runtime's cuBLASLt path (runtime/cublaslt.py) without a GPU: how a row-major operand maps
to cuBLASLt's column-major one, and that a call it cannot take (here: on the CPU) runs nothing, so
that the program's ``addmm_lt`` / ``mm_lt`` run torch's op and match it (the GPU side:
tests/gpu/test_gpu_cublaslt.py)."""

import torch

from aotcombo.runtime import cublaslt
from aotcombo.runtime.ops import addmm_lt, mm_lt


def test_row_and_column_major_operands_map_to_their_transposes():
    x = torch.empty(6, 4)
    assert cublaslt._operand(x) == (cublaslt._OP_N, 4, 6, 4)  # stored as xT, column-major, ld 4
    assert cublaslt._operand(x.t()) == (cublaslt._OP_T, 4, 6, 4)  # x itself stored: transposed
    assert cublaslt._operand(torch.empty(6, 8)[:, :4]) == (cublaslt._OP_N, 4, 6, 8)  # a padded row
    assert cublaslt._operand(torch.empty(6, 4, 2)[:, :, 0]) is None  # neither dim contiguous


def test_cpu_calls_run_torchs_op():
    mat1, mat2, bias = torch.randn(2048, 64), torch.randn(32, 64).t(), torch.randn(32)
    out = torch.empty(2048, 32)
    assert not cublaslt.matmul(mat1, mat2, bias, out)
    assert addmm_lt(bias, mat1, mat2, out=out) is out
    torch.testing.assert_close(out, torch.addmm(bias, mat1, mat2))
    assert mm_lt(mat1, mat2, out=out) is out
    torch.testing.assert_close(out, mat1 @ mat2)
