"""The free numerics a morphism depends on (to bind sizes for a morphism given alone)."""
from __future__ import annotations

import dataclasses

import sympy

from ncdc.ir.numeric import FreeNumeric


def free_numerics(root) -> set[FreeNumeric]:
    """Every :class:`FreeNumeric` reachable from ``root`` through IR fields (axis sizes,
    datatype bounds, reindexing strides, operator constants, formulas, repetitions)."""
    found: set[FreeNumeric] = set()
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if isinstance(obj, sympy.Basic):
            found.update(s for s in obj.free_symbols if isinstance(s, FreeNumeric))
            continue
        if isinstance(obj, (str, int, float, bool, type(None))) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (tuple, list, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif dataclasses.is_dataclass(obj):
            stack.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
    return found
