"""One error measure for every comparison with eager: the relative L2 error, and the tolerances
per dtype that go with it.

The rule: ``relative_error(got, ref) = ||got - ref|| / ||ref||`` (L2 norms over every element,
computed in float64), for tensors of one shape. A reference with no nonzero element (all
zeros, or no elements at all) has no relative error: ``relative_error`` raises
``AssertionError`` saying so, so a check against it fails rather than passing vacuously (an
all-zero eager output usually means a zero-initialised head or a dead branch: the comparison
would prove nothing). That keeps every tolerance a caller states a relative one: falling back
to the absolute error would make ``1e-4`` mean something else for such an output, and
clamping the denominator would pass zeros against zeros. ``relative_error_tensor`` is the same
measure left on the device (no synchronization): there an all-zero reference gives NaN or inf,
which no tolerance admits. Integer and bool outputs are compared exactly, not through this.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree

# Relative L2 error allowed per output dtype (integer and bool outputs: exact).
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-7, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def relative_error_tensor(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``||got - ref|| / ||ref||`` as a float64 scalar tensor on the tensors' device, without
    waiting for it; NaN or inf when ``ref`` has no nonzero element."""
    got, ref = got.double(), ref.double()
    return (got - ref).norm() / ref.norm()


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """The relative L2 error of ``got`` against the reference ``ref`` (see the module's rule);
    raises AssertionError when ``ref`` has no nonzero element."""
    if ref.numel() == 0 or not bool(ref.any()):
        raise AssertionError(f"the reference ({ref.dtype}{list(ref.shape)}) has no nonzero element: a relative "
                             "error against it would prove nothing")
    return float(relative_error_tensor(got, ref))


def leaves(tree) -> list[torch.Tensor]:
    """The tensors of an output tree, in order (other leaves dropped)."""
    return [t for t in _pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def compare(got, ref) -> list[tuple[float, float]]:
    """(error, tolerance) per output leaf: the relative error for floating outputs, 0.0 or 1.0
    (equal or not) against 0.0 for integer and bool ones; raises on a structure, shape or dtype
    mismatch, or a NaN in ``got`` where ``ref`` has none."""
    got_leaves, got_spec = _pytree.tree_flatten(got)
    ref_leaves, ref_spec = _pytree.tree_flatten(ref)
    assert got_spec == ref_spec, f"output structure differs: {got_spec} vs {ref_spec}"
    results = []
    for g, r in zip(got_leaves, ref_leaves):
        assert g.shape == r.shape and g.dtype == r.dtype, f"{g.shape}/{g.dtype} vs {r.shape}/{r.dtype}"
        if not r.is_floating_point():
            results.append((0.0 if torch.equal(g, r) else 1.0, 0.0))
            continue
        assert not torch.isnan(g).any() or torch.isnan(r).any(), "NaN in the package's output"
        results.append((relative_error(g, r), TOLERANCE.get(r.dtype, 0.0)))
    return results
