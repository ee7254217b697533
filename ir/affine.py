"""Reindexings as affine index maps: the one normalisation (docs/format.md §7).

Every stride-category morphism — ``Rearrangement`` over axes, ``StrideMorphism``, and
``Block`` / ``ProductOfMorphisms`` / ``Composed`` of them — is an affine map from index tuples of
its domain axes to index tuples of its codomain axes, like an MLIR ``linalg`` indexing map
``(d0, ..., dn) -> (e0, ..., em)``::

    cod[j] = sum_i rows[j][i] * dom[i] + shifts[j]

with symbolic (sympy) strides and shifts. Unlike MLIR, an index is never wrapped or clamped: a
domain position ``d`` is **live** iff every ``cod[j]`` lies in ``[0, |cod axis j|)`` *and* every
intermediate index of a composition lies in ``[0, |its axis|)`` (``interpreter/READINGS.md``
item 2); otherwise it is **dead** (a gather reads the unit, a scatter writes nothing).

The rule, case by case:

* ``Rearrangement(mapping)``: ``rows[j] = e_{mapping[j]}``, shift 0 — permute, copy (a repeated
  entry is a diagonal), drop (an absent entry broadcasts over that domain axis);
* ``StrideMorphism``: its rows as written, one stride per domain axis;
* ``Block``: its body (in a reindexing the tag only labels the view: ``win``, ``prefix``, ...);
* ``ProductOfMorphisms``: block-diagonal — the domain tuple splits into consecutive chunks of
  the parts' arities;
* ``Composed(f, g, ...)``: substitution, ``g(f(d)) = G (F d + a) + b``; every codomain index of
  ``f`` becomes a :class:`RangeConstraint` over the domain (as do ``f``'s and ``g``'s own,
  pulled back), except those that are trivially in range (a domain index copied onto an axis of
  the same size).

:func:`affine_map` gives the symbolic :class:`AffineMap`; :meth:`AffineMap.bind` evaluates it
under an :class:`~ir.env.Env` to a :class:`BoundAffineMap` of plain integers, which also answers
the range questions (:meth:`~BoundAffineMap.apply`, :meth:`~BoundAffineMap.ranges`,
:meth:`~BoundAffineMap.always_in_range`). How a map is *executed* (numpy index grids, strided
views, torch code) belongs to the interpreter and the code generator.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import sympy

from .axes import Axis
from .env import Env
from .errors import SpecError, SpecTypeError
from .frozen import cached_property, quick_init
from .morphisms import Block, Composed, ProductOfMorphisms, Rearrangement, StrideMorphism
from .walk import by_kind

ZERO, ONE = sympy.Integer(0), sympy.Integer(1)

Row = tuple[sympy.Expr, ...]


@quick_init
@dataclass(frozen=True)
class RangeConstraint:
    """An intermediate index ``row . dom + shift`` of a composition, which must lie in
    ``[0, axis.size)`` for the domain position to be live."""

    row: Row
    shift: sympy.Expr
    axis: Axis

    @property
    def bound(self) -> sympy.Expr:
        """The exclusive upper bound: the intermediate axis' size."""
        return self.axis.size


@quick_init
@dataclass(frozen=True)
class AffineMap:
    """``cod[j] = rows[j] . dom + shifts[j]`` (sympy entries); a domain position is live iff
    every ``cod[j]`` is in ``[0, |cod[j]|)`` and every constraint holds."""

    dom: tuple[Axis, ...]
    cod: tuple[Axis, ...]
    rows: tuple[Row, ...]
    shifts: tuple[sympy.Expr, ...]
    constraints: tuple[RangeConstraint, ...] = ()

    def row(self, j: int) -> tuple[Row, sympy.Expr]:
        """Codomain axis ``j``'s row and shift."""
        return self.rows[j], self.shifts[j]

    def bind(self, env: Env) -> BoundAffineMap:
        """The integer form under ``env`` (sizes, strides and shifts evaluated exactly)."""
        size = env.size
        return BoundAffineMap(
            tuple(size(a.size) for a in self.dom),
            tuple(size(a.size) for a in self.cod),
            tuple(tuple(size(s) for s in row) for row in self.rows),
            tuple(size(b) for b in self.shifts),
            tuple(BoundConstraint(tuple(size(s) for s in c.row), size(c.shift), size(c.bound))
                  for c in self.constraints))


class BoundConstraint(NamedTuple):
    """A :class:`RangeConstraint` under a binding: live needs ``0 <= row . d + shift < size``."""

    row: tuple[int, ...]
    shift: int
    size: int


@quick_init
@dataclass(frozen=True)
class BoundAffineMap:
    """An :class:`AffineMap` under a binding: plain integers throughout."""

    dom_sizes: tuple[int, ...]
    cod_sizes: tuple[int, ...]
    rows: tuple[tuple[int, ...], ...]
    shifts: tuple[int, ...]
    constraints: tuple[BoundConstraint, ...] = ()

    def apply(self, index) -> tuple[int, ...] | None:
        """The codomain index of domain index ``index``, or None where the position is dead."""
        for c in self.constraints:
            if not 0 <= _dot(c.row, index) + c.shift < c.size:
                return None
        out = tuple(_dot(row, index) + b for row, b in zip(self.rows, self.shifts, strict=True))
        if all(0 <= c < n for c, n in zip(out, self.cod_sizes, strict=True)):
            return out
        return None

    def checks(self) -> tuple[BoundConstraint, ...]:
        """Every range condition of the map: one per codomain axis, then the constraints."""
        return tuple(BoundConstraint(row, b, n) for row, b, n in
                     zip(self.rows, self.shifts, self.cod_sizes, strict=True)) + self.constraints

    def range_of(self, row, shift: int) -> tuple[int, int]:
        """(lowest, highest) value of ``row . d + shift`` over the domain box (non-empty)."""
        lo = hi = shift
        for s, d in zip(row, self.dom_sizes, strict=True):
            span = s * (d - 1)
            lo += min(0, span)
            hi += max(0, span)
        return lo, hi

    def in_range(self, check: BoundConstraint) -> bool:
        """Whether ``check`` holds at every position of the domain box."""
        if 0 in self.dom_sizes:
            return True
        lo, hi = self.range_of(check.row, check.shift)
        return lo >= 0 and hi < check.size

    @cached_property
    def ranges(self) -> list[tuple[int, int]]:
        """(lowest, highest) codomain index over the domain box, per codomain axis (computed
        once; never written)."""
        return [self.range_of(row, b) for row, b in zip(self.rows, self.shifts, strict=True)]

    @cached_property
    def always_in_range(self) -> bool:
        """Whether every position of the domain box is live."""
        return all(self.in_range(c) for c in self.checks())

    @cached_property
    def constraints_in_range(self) -> bool:
        """Whether no intermediate index can leave its axis (only the codomain can)."""
        return all(self.in_range(c) for c in self.constraints)


def _dot(row, index) -> int:
    return sum(s * i for s, i in zip(row, index, strict=True))


def affine_map(m) -> AffineMap:
    """Normalise a stride-category morphism to its :class:`AffineMap` (rule in the module
    docstring). Anything else, a stride row of the wrong length, an empty or ill-joined
    composition is a :class:`~ir.errors.SpecError` at the morphism's JSON path."""
    rule = by_kind(_RULES, m)
    if rule is None:
        raise SpecError(f"a {type(m).__name__} cannot be used as a reindexing",
                        getattr(m, "path", ""), node_type=type(m).__name__)
    return rule(m)


def _rearrangement(m: Rearrangement) -> AffineMap:
    dom = _axes(m, m.dom_)
    rows = tuple(_unit(k, len(dom)) for k in m.mapping)
    return AffineMap(dom, tuple(m.cod), rows, (ZERO,) * len(rows))


def _stride(m: StrideMorphism) -> AffineMap:
    dom = _axes(m, m.dom_)
    for r in m.rows:
        if len(r.strides) != len(dom):
            raise SpecError(f"stride row for {r.axis.label} has {len(r.strides)} strides "
                            f"for a domain of {len(dom)} axes", m.path,
                            node_type="StrideMorphism")
    return AffineMap(dom, tuple(m.cod),
                     tuple(tuple(sympy.sympify(s) for s in r.strides) for r in m.rows),
                     tuple(sympy.sympify(r.shift) for r in m.rows))


def _composed(m: Composed) -> AffineMap:
    if not m.content:
        raise SpecError("empty composition of reindexings", m.path, node_type="Composed")
    acc = affine_map(m.content[0])
    for nxt in m.content[1:]:
        acc = _compose(acc, affine_map(nxt), m.path)
    return acc


_RULES = {
    Block: lambda m: affine_map(m.body),
    Rearrangement: _rearrangement,
    StrideMorphism: _stride,
    ProductOfMorphisms: lambda m: _product([affine_map(p) for p in m.content]),
    Composed: _composed,
}
"""The normalisation of each stride-category kind (by class, :func:`ir.walk.by_kind`)."""


def _axes(m, dom) -> tuple[Axis, ...]:
    dom = tuple(dom)
    for a in dom:
        if not isinstance(a, Axis):
            raise SpecTypeError(f"a reindexing's domain holds axes, not a {type(a).__name__}",
                                m.path, node_type=type(m).__name__)
    return dom


def _unit(k: int, n: int) -> Row:
    return tuple(ONE if i == k else ZERO for i in range(n))


def _widen(row: Row, off: int, n: int) -> Row:
    """A part's row placed at domain offset ``off`` of an ``n``-axis product domain."""
    return (ZERO,) * off + tuple(row) + (ZERO,) * (n - off - len(row))


def _product(parts: list[AffineMap]) -> AffineMap:
    dom = tuple(a for p in parts for a in p.dom)
    n = len(dom)
    rows: list = []
    shifts: list = []
    cons: list = []
    off = 0
    for p in parts:
        rows.extend(_widen(r, off, n) for r in p.rows)
        shifts.extend(p.shifts)
        cons.extend(RangeConstraint(_widen(c.row, off, n), c.shift, c.axis)
                    for c in p.constraints)
        off += len(p.dom)
    return AffineMap(dom, tuple(a for p in parts for a in p.cod), tuple(rows), tuple(shifts),
                     tuple(cons))


def _compose(f: AffineMap, g: AffineMap, path: str) -> AffineMap:
    """``g after f``: g's rows pulled back through f; f's codomain indices become constraints."""
    if len(f.cod) != len(g.dom):
        raise SpecError(f"composed reindexings do not join: {len(f.cod)} codomain axes meet "
                        f"a domain of {len(g.dom)}", path, node_type="Composed")

    def through(row: Row, b: sympy.Expr) -> tuple[Row, sympy.Expr]:
        new = tuple(sympy.expand(sum((row[k] * f.rows[k][i] for k in range(len(row))), ZERO))
                    for i in range(len(f.dom)))
        return new, sympy.expand(sum((row[k] * f.shifts[k] for k in range(len(row))), b))

    rows, shifts = [], []
    for row, b in zip(g.rows, g.shifts, strict=True):
        r, s = through(row, b)
        rows.append(r)
        shifts.append(s)
    cons = list(f.constraints)
    cons += [RangeConstraint(row, b, axis) for row, b, axis in zip(f.rows, f.shifts, f.cod, strict=True)]
    cons += [RangeConstraint(*through(c.row, c.shift), c.axis) for c in g.constraints]
    cons = [c for c in cons if not _trivially_in_range(c, f.dom)]
    return AffineMap(f.dom, g.cod, tuple(rows), tuple(shifts), tuple(cons))


def _trivially_in_range(c: RangeConstraint, dom: tuple[Axis, ...]) -> bool:
    """Whether ``c`` copies one domain index onto an axis of the same size (always holds)."""
    if c.shift != 0:
        return False
    nz = [i for i, s in enumerate(c.row) if s != 0]
    return (len(nz) == 1 and c.row[nz[0]] == 1
            and (dom[nz[0]] == c.axis or dom[nz[0]].size == c.bound))
