"""A program for dynamic axes must hold for every size in their ranges. Under ``torch.compile`` a
guard added while compiling (a size compared with ``==`` on the example's value, in a rewrite or
in Inductor) is checked at every call and recompiles when it fails; a package has no such check,
so a guard the ranges do not imply would make a program silently wrong at other sizes. Each size
class's compile is checked for one (``refuse_new_guards``), as export's own were (its "Constraints
violated": ``axis_errors``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy
import torch

from ...errors import BUCKETS_INSTEAD, UnsupportedModelError
from .axis_errors import dim_name
from .guard_records import where


def shape_env(ep):
    """The ShapeEnv of an exported program's symbolic sizes, or None (no dynamic axes)."""
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for size in getattr(val, "shape", ()):
            if isinstance(size, torch.SymInt):
                return size.node.shape_env
    return None


@dataclass(frozen=True)
class Baseline:
    """What export established: its guards (the first ``guards``) and each size's range (a guard
    added later may narrow a range to the value it assumed)."""

    guards: int
    ranges: dict


def baseline(env) -> Baseline:
    return Baseline(len(env.guards), dict(env.var_to_range)) if env is not None else Baseline(0, {})


def refuse_new_guards(env, since: Baseline, records: list = ()) -> None:
    """A build error for the first guard added since ``since`` that some sizes in the ranges
    (each symbol's ends, the sizes next to them and the middle) would fail; ``records``: where
    the guards were added (``guard_records.recording``), for the model's line."""
    if env is None:
        return
    for guard in env.guards[since.guards:]:
        failing = _failing_sizes(since.ranges, guard.expr)
        if failing is not None:
            sizes = ", ".join(f"{_name(env, s)} = {v}" for s, v in failing.items())
            added = _where(guard.sloc)
            model = next((where(r.frames) for r in records if r.expr == str(guard.expr) and where(r.frames)), "")
            raise UnsupportedModelError(
                f"compiling the program assumed {guard.expr}{f' at {added}' if added else ''}"
                f"{f', for the model at {model}' if model else ''}, which sizes in the --dynamic ranges break "
                f"({sizes}): the package would be wrong at such sizes",
                fix=BUCKETS_INSTEAD + ", and report it with the model: aotcombo should not have assumed it")


def _failing_sizes(ranges: dict, expr) -> dict | None:
    """Sizes within the symbols' ``ranges`` at which ``expr`` is false, or None if none tried is."""
    symbols = sorted(expr.free_symbols, key=str)
    if not symbols or len(symbols) > 4:
        return None
    tried = []
    for s in symbols:
        r = ranges.get(s)
        if r is None or not r.lower.is_finite or not r.upper.is_finite:
            return None
        low, high = int(r.lower), int(r.upper)
        tried.append(sorted({v for v in (low, low + 1, (low + high) // 2, high - 1, high) if low <= v <= high}))
    for values in itertools.product(*tried):
        if sympy.simplify(expr.xreplace(dict(zip(symbols, map(sympy.Integer, values))))) is sympy.false:
            return dict(zip(symbols, values))
    return None


def _where(sloc) -> str:
    """``match.py:112 in _rms_norm``: the frame that added a guard (torch's SLoc), or ""."""
    frame = getattr(sloc, "framework_loc", None)
    if frame is None or isinstance(frame, str):
        return frame or str(getattr(sloc, "maybe_user_loc", None) or "")
    return f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name}"


def _name(env, symbol) -> str:
    """``input_ids dim 1`` for a size symbol, else the symbol."""
    sources = env.var_to_sources.get(symbol) or []
    return dim_name(sources[0].name) if sources else str(symbol)
