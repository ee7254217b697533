"""Reindexings (stride-category morphisms) as affine maps ``c = M d + t`` for the code generator.

The normalisation is ``ir.affine``'s (docs/format.md §7); here each source dim is classified once: a
plain relabelling (the source dim *is* degree dim ``i``), or a general affine row that needs a
strided read (windows, groups, shifted prefixes). An operand read (``Broadcasted`` reindexing)
whose composition has an intermediate index that can leave its axis adds that index's range
condition to the read's liveness mask; elsewhere (scatters, concatenation parts) such a map is
refused.
"""
from __future__ import annotations

from ncdc.ir import affine
from ncdc.ir.errors import SpecError


def affine_map(m, constraints_ok: bool = False) -> affine.AffineMap:
    """The :class:`AffineMap` of the reindexing ``m``; unless ``constraints_ok``, a SpecError
    where a composition's intermediate index may leave its axis (the caller has no check)."""
    a = affine.affine_map(m)
    if a.constraints and not constraints_ok:
        c = a.constraints[0]
        raise SpecError(f"a composed reindexing whose intermediate index on {c.axis.label} may "
                        "leave its axis is not supported by the code generator",
                        getattr(m, "path", ""), node_type=type(m).__name__)
    return a


def simple_source(amap: affine.AffineMap, j: int, sizes) -> int | None:
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

