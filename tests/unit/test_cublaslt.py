"""The runtime's cuBLASLt path (runtime/cublaslt.py) without a GPU: how a row-major operand maps
to cuBLASLt's column-major one, and that a call it cannot take (here: on the CPU) runs nothing, so
that the program's ``addmm_lt`` / ``mm_lt`` run torch's op and match it; which offered algorithm
the arch's rules (``PREFERRED``, in order, each from its row count) take (the GPU side:
tests/gpu/test_gpu_cublaslt.py)."""

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
    """cublasLtMatmulAlgoConfigGetAttribute over each algorithm's attributes: (algo, {attribute: value}) pairs."""

    def __init__(self, algos: list):
        self.by_address = {ctypes.addressof(algo): attributes for algo, attributes in algos}

    def cublasLtMatmulAlgoConfigGetAttribute(self, algo, attribute, buf, size, written):
        attributes = self.by_address[ctypes.addressof(algo._obj)]
        if attribute not in attributes:
            return 7  # CUBLAS_STATUS_INVALID_VALUE
        buf._obj.value = attributes[attribute]
        return 0


def _rules() -> list:
    """sm_90's configurations in order of preference, each as {attribute: value}."""
    return [{attribute: value for attribute, _, value in config} for _, config in cublaslt.PREFERRED[9]]


def test_an_algorithm_is_preferred_only_with_every_attribute_of_the_rule():
    (_, preferred), *_ = cublaslt.PREFERRED[9]
    wanted = _rules()[0]
    algo = (ctypes.c_uint64 * 8)()
    assert cublaslt._is_preferred(_FakeLib([(algo, wanted)]), algo, preferred)
    for attribute in wanted:  # one attribute off, or one the library does not report
        for attributes in ({**wanted, attribute: wanted[attribute] + 1},
                           {a: v for a, v in wanted.items() if a != attribute}):
            assert not cublaslt._is_preferred(_FakeLib([(algo, attributes)]), algo, preferred)
    assert not cublaslt._is_preferred(_FakeLib([(algo, wanted)]), algo, ())  # no rule: the heuristic's first


class _Offer(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8)]


def test_the_first_preference_offered_is_taken_in_order_else_the_heuristics_first():
    first, second = _rules()
    other = {attribute: value + 1 for attribute, value in first.items()}
    configs = tuple(config for _, config in cublaslt.PREFERRED[9])

    def choice(*kinds, preferences=configs):
        offered = [_Offer() for _ in kinds]
        lib = _FakeLib([(offer.algo, kind) for offer, kind in zip(offered, kinds)])
        return offered.index(cublaslt._choice(lib, offered, preferences))

    assert choice(other, second, first) == 2  # the first preference, wherever the heuristic ranks it
    assert choice(other, second, other) == 1  # else the second
    assert choice(other, other) == 0  # else the heuristic's first
    assert choice(other, second, first, preferences=()) == 0  # no rule (another arch, or too few rows)
    assert choice(other, second, first, preferences=configs[:1]) == 2


def test_the_second_preference_waits_for_its_rows():
    first, second = (config for _, config in cublaslt.PREFERRED[9])
    assert cublaslt._preferences(9, 1024) == (first,)
    assert cublaslt._preferences(9, 4095) == (first,)
    assert cublaslt._preferences(9, 4096) == (first, second)
    assert cublaslt._preferences(8, 16384) == ()  # no rule measured for sm_8x: the heuristic's first
