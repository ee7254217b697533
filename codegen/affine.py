"""Reindexings (stride-category morphisms) as affine maps ``c = M d + t``.

Every reindexing of a spec — ``Rearrangement``, ``StrideMorphism`` and their products,
compositions and blocks — is an affine map from degree positions ``d`` to source positions ``c``
(FORMAT.md §7). Normalising to one matrix lets the code generator classify each source dim once:
a plain relabelling (the source dim *is* degree dim ``i``), or a general affine row that needs a
strided read (windows, groups, shifted prefixes).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ir.axes import Axis
from ir.errors import SpecError
from ir.morphisms import Block, Composed, ProductOfMorphisms, Rearrangement, StrideMorphism


@dataclass(frozen=True)
class AffineMap:
    """``cod[j] = sum_i matrix[j][i] * dom[i] + shift[j]`` (sympy entries)."""

    dom: tuple[Axis, ...]
    cod: tuple[Axis, ...]
    matrix: tuple[tuple[sympy.Expr, ...], ...]
    shift: tuple[sympy.Expr, ...]

    def row(self, j: int) -> tuple[tuple[sympy.Expr, ...], sympy.Expr]:
        return self.matrix[j], self.shift[j]


def affine_map(m) -> AffineMap:
    """Normalise a stride-category morphism to an :class:`AffineMap`."""
    zero, one = sympy.Integer(0), sympy.Integer(1)
    if isinstance(m, Rearrangement):
        dom = tuple(m.dom)
        rows = tuple(tuple(one if i == k else zero for i in range(len(dom))) for k in m.mapping)
        return AffineMap(dom, tuple(m.cod), rows, tuple(zero for _ in m.mapping))
    if isinstance(m, StrideMorphism):
        dom = tuple(m.dom)
        rows, shifts = [], []
        for r in m.rows:
            if len(r.strides) != len(dom):
                raise SpecError(f"stride row for {r.axis.label} has {len(r.strides)} strides for "
                                f"a domain of {len(dom)} axes", m.path,
                                node_type="StrideMorphism")
            rows.append(tuple(sympy.sympify(s) for s in r.strides))
            shifts.append(sympy.sympify(r.shift))
        return AffineMap(dom, tuple(m.cod), tuple(rows), tuple(shifts))
    if isinstance(m, Block):
        return affine_map(m.body)
    if isinstance(m, ProductOfMorphisms):
        parts = [affine_map(c) for c in m.content]
        dom = tuple(a for p in parts for a in p.dom)
        cod = tuple(a for p in parts for a in p.cod)
        rows, shifts, offset = [], [], 0
        for p in parts:
            for r, s in zip(p.matrix, p.shift):
                rows.append(tuple([zero] * offset + list(r) + [zero] * (len(dom) - offset - len(r))))
                shifts.append(s)
            offset += len(p.dom)
        return AffineMap(dom, cod, tuple(rows), tuple(shifts))
    if isinstance(m, Composed):
        if not m.content:
            raise SpecError("empty composition of index maps", m.path, node_type="Composed")
        acc = affine_map(m.content[0])
        for nxt in m.content[1:]:
            b = affine_map(nxt)
            # c = B (A d + a) + b
            rows = tuple(tuple(sympy.expand(sum((b.matrix[j][k] * acc.matrix[k][i]
                                                 for k in range(len(acc.cod))), zero))
                               for i in range(len(acc.dom))) for j in range(len(b.cod)))
            shifts = tuple(sympy.expand(sum((b.matrix[j][k] * acc.shift[k]
                                             for k in range(len(acc.cod))), zero) + b.shift[j])
                           for j in range(len(b.cod)))
            acc = AffineMap(acc.dom, b.cod, rows, shifts)
        return acc
    raise SpecError(f"{type(m).__name__} is not an index map", getattr(m, "path", ""))


def simple_source(amap: AffineMap, j: int, sizes) -> int | None:
    """The degree dim ``i`` when source dim ``j`` is a plain relabelling of it (stride 1, shift
    0, equal sizes under ``sizes``), else None."""
    row, shift = amap.row(j)
    nz = [i for i, s in enumerate(row) if s != 0]
    if len(nz) != 1 or row[nz[0]] != 1 or shift != 0:
        return None
    i = nz[0]
    if amap.dom[i] == amap.cod[j] or sizes(amap.dom[i]) == sizes(amap.cod[j]):
        return i
    return None


def int_rows(amap: AffineMap, js, size_of_expr) -> list[tuple[tuple[int, ...], int]]:
    """Integer rows (under a binding) for source dims ``js``."""
    return [(tuple(size_of_expr(s) for s in amap.matrix[j]), size_of_expr(amap.shift[j]))
            for j in js]
