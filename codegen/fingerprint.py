"""Structural fingerprints of IR terms: equal keys mean the generated code is the same.

Axes, tags, tape slots and symbols are identified by uid; JSON paths are ignored (the same block
body used at two places gets one key).
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib

import sympy

from ncdc.ir.axes import Axis
from ncdc.ir.morphisms import Morphism
from ncdc.ir.tags import BlockTag, TapeSlot

TAG_FIELDS = ("title", "description", "formula", "repetition", "drawing", "counter")


def _canon(obj, cache: dict) -> str:
    if isinstance(obj, Morphism):
        hit = cache.get(id(obj))
        if hit is not None:
            return hit[1]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        out = repr(obj)
    elif isinstance(obj, enum.Enum):
        out = f"{type(obj).__name__}.{obj.name}"
    elif isinstance(obj, Axis):
        out = f"axis#{obj.uid}"
    elif isinstance(obj, BlockTag):
        # a tag by what it says (two tag records with the same content label alike)
        out = "tag(" + ",".join(_canon(getattr(obj, f), cache) for f in TAG_FIELDS) + ")"
    elif isinstance(obj, TapeSlot):
        out = f"slot#{obj.uid}"
    elif isinstance(obj, sympy.Basic):
        out = sympy.srepr(obj)
    elif isinstance(obj, (tuple, list)):
        out = "(" + ",".join(_canon(x, cache) for x in obj) + ")"
    elif isinstance(obj, dict):
        out = "{" + ",".join(f"{k!r}:{_canon(v, cache)}" for k, v in sorted(obj.items())) + "}"
    elif dataclasses.is_dataclass(obj):
        fields = [f"{f.name}={_canon(getattr(obj, f.name), cache)}"
                  for f in dataclasses.fields(obj) if f.name != "path"]
        out = type(obj).__name__ + "(" + ",".join(fields) + ")"
    else:
        out = f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, Morphism):
        out = hashlib.sha256(out.encode()).hexdigest()
        cache[id(obj)] = (obj, out)
    return out


def structural_key(m, cache: dict | None = None) -> str:
    """A hex digest of ``m``'s structure (memoised per object in ``cache``)."""
    return _canon(m, {} if cache is None else cache)
