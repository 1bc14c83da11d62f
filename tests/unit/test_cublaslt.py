"""The runtime's cuBLASLt path (runtime/cublaslt.py) without a GPU: how a row-major operand maps
to cuBLASLt's column-major one, and that a call it cannot take (here: on the CPU) runs nothing, so
that the program's ``addmm_lt`` / ``mm_lt`` run torch's op and match it; which offered algorithm
the arch's rule (``PREFERRED``) takes (the GPU side: tests/gpu/test_gpu_cublaslt.py)."""

import ctypes

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


class _FakeLib:
    """cublasLtMatmulAlgoConfigGetAttribute over a dict of an algorithm's attributes."""

    def __init__(self, attributes: dict):
        self.attributes = attributes

    def cublasLtMatmulAlgoConfigGetAttribute(self, algo, attribute, buf, size, written):
        if attribute not in self.attributes:
            return 7  # CUBLAS_STATUS_INVALID_VALUE
        buf._obj.value = self.attributes[attribute]
        return 0


def test_an_algorithm_is_preferred_only_with_every_attribute_of_the_rule():
    (preferred,) = cublaslt.PREFERRED.values()
    wanted = {attribute: value for attribute, _, value in preferred}
    algo = (ctypes.c_uint64 * 8)()
    assert cublaslt._is_preferred(_FakeLib(wanted), algo, preferred)
    for attribute in wanted:  # one attribute off, or one the library does not report
        assert not cublaslt._is_preferred(_FakeLib({**wanted, attribute: wanted[attribute] + 1}), algo, preferred)
        assert not cublaslt._is_preferred(_FakeLib({a: v for a, v in wanted.items() if a != attribute}), algo,
                                          preferred)
    assert not cublaslt._is_preferred(_FakeLib(wanted), algo, ())  # no rule: the heuristic's first
