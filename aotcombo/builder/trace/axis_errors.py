"""Dynamic axes a model does not allow, said so a user can act: the axis and the range asked,
what the model's code needs of it, solved for the axis (``seq != 2``, ``seq <= 128``, seq fixed
at 16), the model's line that needs it, and the ``--dynamic`` that builds.

``torch.export`` says which guard a range violates ("Constraints violated"), not where the
model's code added it. Two records of where: each guard the export on the virtual GPU adds
(``guard_records``: a guard torch's own code adds for CUDA, such as a layout heuristic, is only
there), and ``torch.export.draft_export``'s, run again on the CPU on the failure path only
(``guard_sites``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from unittest import mock

import sympy

from ...errors import UnsupportedModelError
from .guard_records import model_stack, where

_NOT_ALL = re.compile(r"Not all values of (\w+) = (.*?) in the specified range (.*?) satisfy the generated guard (.*)")
_SPECIALIZED = re.compile(r"You marked (\w+) as dynamic but your code specialized it to be a constant \((-?\d+)\)")
_SOURCE = re.compile(r"L\['(\w+)'\]((?:\[\d+\])*)\.size\(\)\[(\d+)\]")
_RANGE_FIX = re.compile(r"^\s*(\w+) = Dim\('\w+'(?:, min=(\d+))?(?:, max=(\d+))?\)", re.M)
_FIXED = re.compile(r"^\s*(\w+) = (\d+)\s*$", re.M)
_RELATION = re.compile(r"(==|!=|<=|>=|<|>)")


def violated(exc: BaseException) -> bool:
    """Whether ``exc`` is export's error for dynamic ranges the model does not allow."""
    return "Constraints violated" in str(exc)


@dataclass(frozen=True)
class Site:
    """A guard on input sizes the model's code added, and where."""

    relation: sympy.Basic  # over Dims' symbols
    where: str  # " at file.py:12 (`code`)"


class Dims:
    """Input dims (export's sources, ``L['input_ids'].size()[1]``) as sympy symbols, named after
    the axis that carries them where known (else "input_ids dim 1")."""

    def __init__(self):
        self.symbols: dict[str, sympy.Symbol] = {}
        self.names: dict[sympy.Symbol, str] = {}

    def symbol(self, source: str) -> sympy.Symbol:
        key = source.strip()
        if key not in self.symbols:
            symbol = sympy.Symbol(f"d{len(self.symbols)}", integer=True)
            self.symbols[key] = symbol
            self.names[symbol] = dim_name(key)
        return self.symbols[key]

    def name_axis(self, source: str, axis: str) -> None:
        self.names[self.symbol(source)] = axis

    def one_axis(self, sources: list[str], axis: str) -> None:
        """The input dims that carry ``axis`` (export's sources): one symbol, named after it."""
        symbol = self.symbol(sources[0])
        self.symbols.update({source.strip(): symbol for source in sources})
        self.names[symbol] = axis

    def parse(self, text: str, symbols: dict[str, str] | None = None) -> sympy.Basic | None:
        """``text``, export's guard with sources (``symbols`` None) or draft export's over its own
        symbols (``symbols``: theirs to sources), as a sympy relation over ours; None if it is not one."""
        try:
            if symbols is not None:
                names = {s: self.symbol(source) for s, source in symbols.items()}
                return sympy.sympify(text, locals=names)
            text = _SOURCE.sub(lambda m: self.symbol(m.group(0)).name, text)
            depth, parts = 0, None
            for i, c in enumerate(text):  # the relation at the top level: "(a + b) != 1"
                depth += (c == "(") - (c == ")")
                found = _RELATION.match(text, i) if depth == 0 else None
                if found and parts is None:
                    parts = (text[:i], found.group(1), text[found.end():])
            if parts is None:
                return None
            lhs, op, rhs = parts
            local = {s.name: s for s in self.symbols.values()}
            return sympy.sympify(f"{'Ne' if op == '!=' else 'Eq' if op == '==' else 'Rel'}(({lhs}), ({rhs})"
                                 + ("" if op in ("!=", "==") else f", '{op}'") + ")", locals=local)
        except (sympy.SympifyError, SyntaxError, TypeError):
            return None

    def solved(self, relation: sympy.Basic) -> tuple[str, str, sympy.Basic] | None:
        """``relation`` solved for its one dim where it is linear: (its name, the operator, the
        value), ``("seq", "!=", 2)``; else None."""
        relation = sympy.simplify(relation)
        free = sorted(relation.free_symbols, key=str)
        if not isinstance(relation, sympy.core.relational.Relational) or len(free) != 1:
            return None
        (x,), diff = free, sympy.expand(relation.lhs - relation.rhs)
        a, b = diff.coeff(x, 1), diff.subs(x, 0)
        if a == 0 or sympy.expand(diff - a * x - b) != 0:
            return None
        op = relation.rel_op if a > 0 else {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(relation.rel_op,
                                                                                          relation.rel_op)
        return self.names[x], op, sympy.nsimplify(-b / a)

    def said(self, relation: sympy.Basic) -> str:
        """``relation`` solved for its one dim where it is linear (``seq != 2``), else as it is."""
        solved = self.solved(relation)
        if solved is not None:
            return " ".join(map(str, solved))
        relation = sympy.simplify(relation)
        text = str(relation)
        for symbol, name in self.names.items():
            text = re.sub(rf"\b{symbol.name}\b", name, text)
        return text


def recorded_sites(records: list, dims: Dims) -> list[Site]:
    """``guard_records.recording``'s records as sites."""
    return [site for r in records if (site := _site(dims, r.expr, r.sources, r.frames)) is not None]


def guard_sites(draft, dims: Dims) -> list[Site]:
    """The guards ``draft()`` (a ``torch.export.draft_export`` of the model) records as added,
    each with its innermost frame of the model's code (the user's or a library's: not torch's or
    ours); none if it fails too."""
    from torch._logging import structured

    try:  # the user stack a guard records: the model's innermost frames, past ours (the virtual GPU's)
        with mock.patch.object(structured, "get_user_stack", model_stack):
            report = draft()._report
    except Exception:  # noqa: BLE001 - no sites: the error says what export said
        return []
    sites = []
    for failure in report.failures:
        if failure.failure_type.name != "GUARD_ADDED":
            continue
        stack = [dict(f, filename=f["filename"] if isinstance(f["filename"], str)
                      else report.str_to_filename.get(f["filename"])) for f in failure.data.get("user_stack") or []]
        site = _site(dims, failure.data["expr"], failure.data.get("symbol_to_sources", {}), stack)
        if site is not None:
            sites.append(site)
    return sites


def _site(dims: Dims, expr: str, sources: dict, stack) -> Site | None:
    """A guard's site: its relation over ``dims`` and the innermost frame of the model's code
    in ``stack``; None without either."""
    relation, at = dims.parse(expr, sources), where(stack)
    return Site(relation, f" at {at}") if relation is not None and at else None


def _site_of(relation, sites: list[Site]) -> str:
    """Where the model added ``relation`` (the same relation, or else one on the same dims that
    is not two dims found equal), or ""."""
    same = [s for s in sites if sympy.simplify(s.relation) == sympy.simplify(relation)]
    near = [s for s in sites if s.relation.free_symbols & relation.free_symbols
            and not (isinstance(s.relation, sympy.Eq) and len(s.relation.free_symbols) == 2)]
    return (same or near or [Site(relation, "")])[0].where if sites else ""


def axis_failure(exc: BaseException, sites: list[Site] = (), ranges: dict | None = None,
                 dims: Dims | None = None) -> UnsupportedModelError | None:
    """The build error for dynamic axes the model does not allow (export's "Constraints
    violated"): which axis, the range asked, what the model needs and where, and the
    ``--dynamic`` that builds; None for any other failure. ``ranges``: each axis's (min, max)."""
    text = str(exc)
    if not violated(exc):
        return None
    dims, ranges = dims or Dims(), ranges or {}
    why, fixes, apart, fixed = [], [], [], []
    for axis, source, asked, guard in _NOT_ALL.findall(text):
        dims.name_axis(source, axis)
        guard = guard.strip().rstrip(".")
        relations = [dims.parse(part) for part in guard.split(" and ")]  # "2 <= seq and seq <= 128"
        # not export's own lower bound of 2 (it takes sizes 0 and 1 apart; a range from 1 still serves 1)
        relations = [r for r in relations if r is None or (dims.solved(r) or ())[1:] != (">=", 2)] or relations
        low, high = ranges.get(axis, (None, None))
        span = f"{low}..{high}" if low is not None else asked
        if None in relations:
            why.append(f"{axis} in {span} (the model needs {dim_name(guard)})")
            continue
        at = next((w for w in (_site_of(r, sites) for r in relations) if w), "")
        why.append(f"{axis} in {span}: the model needs {' and '.join(dims.said(r) for r in relations)}{at}")
        if len(relations) != 1:
            continue
        relation, = relations
        solved = dims.solved(relation)
        excluded = int(solved[2]) if solved and solved[1] == "!=" else None
        if excluded is not None and low is not None and low <= excluded <= high:
            sides = [r for r in ((low, excluded - 1), (excluded + 1, high)) if r[0] <= r[1]]
            if sides:
                keep = max(sides, key=lambda r: r[1] - r[0])
                fixes.append(f"{axis}={keep[0]}:{keep[1]}")
                apart.append(axis)
    for axis, size in _SPECIALIZED.findall(text):
        at = [s.where for s in sites if isinstance(s.relation, sympy.Eq) and len(s.relation.free_symbols) == 1
              and sympy.Integer(size) in (s.relation.lhs, s.relation.rhs)]
        why.append(f"the model's code fixes {axis} at {size}{at[0] if at else ''}")
        fixed.append(axis)
    if not why:  # axes found equal, or another form: export's own lines say how
        why = [line.strip() for line in text.splitlines()[1:] if line.strip().startswith("- ")][:4]
    fixes += [f"{axis}={low or 1}:{high}" if high else f"{axis}={low}:MAX" for axis, low, high in
              _RANGE_FIX.findall(text) if not any(f.startswith(f"{axis}=") for f in fixes)]
    fixed += [axis for axis, _ in _FIXED.findall(text) if axis not in fixed]
    why, fixed = list(dict.fromkeys(why)), list(dict.fromkeys(fixed))  # an axis of two inputs: said once
    advice = [f"build with --dynamic {','.join(fixes)} (the other axes as they are)"] if fixes else []
    advice += [f"sizes of {axis} outside that range need a package of their own (--buckets {axis}=...)"
               for axis in apart]
    advice += [f"leave {axis} out of --dynamic (--buckets {axis}=... traces a program a size)" for axis in fixed]
    return UnsupportedModelError(
        "the model does not allow every size in the --dynamic ranges: " + "; ".join(why or [text.splitlines()[0]]),
        fix="; ".join(advice) or "narrow the --dynamic ranges to sizes the model takes")


def dim_name(source: str) -> str:
    """``input_ids dim 1`` for export's source of a size, ``L['input_ids'].size()[1]``."""
    return _SOURCE.sub(lambda m: f"{m.group(1)}{m.group(2)} dim {m.group(3)}", source)
