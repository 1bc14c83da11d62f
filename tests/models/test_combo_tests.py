"""PyTorch's own combo-kernel tests (``test/inductor/test_combo_kernels.py``), ported to
aotcombo models in ``tests/models/combo_test_models.py``: each builds for sm_90, launches no more per
forward than Inductor's own combo kernels on the same model (both counted in this process),
and matches eager under Triton's CPU interpreter on fresh random inputs.

The fast subset (``-m "not slow"``) counts launches for every case but sm_90 builds whose
kernels take long to compile, and checks outputs for the cases in ``FAST_CHECKS``: one of each
kind of partition (pointwise, reductions with indices, split and looped reductions, a scan,
in-place updates, 2-D tiles, strided views, integer outputs, a dynamic batch, a reduction over
the dynamic batch, a size passed as i32 and as i64).
The rest are ``slow``.
"""

import pytest

from aotcombo.errors import UnsupportedModelError
from aotcombo.testing import combo as S
from aotcombo.testing.corpora import combo_test_models

M = combo_test_models()

FAST_CHECKS = {
    "activations", "reduce", "mutated", "blocking_2d", "per_config_poi_3d", "pointwise_and_reductions",
    "bucketize_carve_out", "inner_outer_128x256", "activations_dynamic", "sums_dim1_dynamic", "full_sums_dynamic",
    "blocking_2d_round_robin_dynamic", "reduce_split", "per_config_red_per", "sum_mean_cumsum",
}
FAST_ROUND_ROBIN = {"activations", "mutated", "blocking_2d", "activations_dynamic"}
SLOW_BUILDS = {"sort_tanh", "wide_resnet"}  # kernels that take a minute or more to compile on 2 cores


def _marks(case: M.Case, slow: bool) -> list:
    marks = [pytest.mark.slow] if slow else []
    if case.blocked:
        marks.append(pytest.mark.xfail(raises=UnsupportedModelError, strict=True, reason=case.blocked))
    return marks


def _count_params():
    for name, case in M.CASES.items():
        yield pytest.param(name, marks=_marks(case, case.blocked or name in SLOW_BUILDS), id=name)


def _check_params():
    for name, case in M.CASES.items():
        for dispatch in ("sequential", "round_robin"):
            fast = name in FAST_CHECKS and (dispatch == "sequential" or name in FAST_ROUND_ROBIN)
            yield pytest.param(name, dispatch, marks=_marks(case, not fast), id=f"{dispatch}-{name}")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One build cache for the module: a case's check reuses the trace of its count."""
    return tmp_path_factory.mktemp("cache")


def test_every_pytorch_test_is_ported_or_explained():
    mapped = [t for case in M.CASES.values() for t in case.tests]
    assert len(mapped) == len(set(mapped)), "a PyTorch test is mapped to two cases"
    assert set(mapped) <= set(M.PYTORCH_TESTS), set(mapped) - set(M.PYTORCH_TESTS)
    assert not set(mapped) & set(M.NOT_PORTED)
    assert set(mapped) | set(M.NOT_PORTED) == set(M.PYTORCH_TESTS), (
        set(M.PYTORCH_TESTS) - set(mapped) - set(M.NOT_PORTED))
    assert len(M.PYTORCH_TESTS) == len(set(M.PYTORCH_TESTS))


@pytest.mark.parametrize("name", list(M.CASES))
def test_check_inputs_are_fresh_and_nonzero(name):
    """The interpreter check is not vacuous: two seeds draw different data, not all zeros."""
    assert S.fresh_inputs_differ(M.CASES[name])


@pytest.mark.parametrize("name", list(_count_params()))
def test_launches_no_more_than_inductor_combo_kernels(name, tmp_path, cache):
    case = M.CASES[name]
    model, result = S.build(case, tmp_path, cache=cache)
    uncombined, ours, inductor = S.count(case, model, result)
    assert ours <= inductor, f"{name}: aotcombo launches {ours} per forward, Inductor's combo kernels {inductor}"
    assert inductor <= uncombined


@pytest.mark.parametrize("name, dispatch", list(_check_params()))
def test_matches_eager_under_the_interpreter(name, dispatch, tmp_path, cache):
    case = M.CASES[name]
    model, result = S.build(case, tmp_path, small=bool(case.small), dispatch=dispatch, cache=cache)
    assert all(c.dispatch == dispatch for c in result.variants[0].plan.combos if len(c.subs) > 1)
    for batch in case.check_batches or [None]:
        S.check(case, model, result, S.check_inputs(case, S.CHECK_SEEDS[0], batch))
